"""wamcore model plugin for LeRobot policies (``wam_lerobot.plugin``: the hooks)."""
