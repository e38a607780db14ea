"""openpi policy servers as a wamcore model backend (``openpi-remote``), and openpi's LIBERO
and RoboTwin keys for ``wam serve --protocol openpi``. See docs/openpi.md."""
