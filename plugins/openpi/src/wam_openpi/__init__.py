"""openpi's websocket policy protocol, both ways: openpi policy servers as a wamcore model
backend (``openpi-remote``), and any wamcore model served to openpi clients (the serving
protocol ``openpi``: ``wam serve --protocol openpi``, in openpi's LIBERO and RoboTwin keys
or a generic layout). See docs/openpi.md."""
