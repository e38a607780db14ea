"""wamcore model plugin for StarWAM (shaohua-pan/StarWAM) on LIBERO and RoboTwin 2.0."""
