"""openpi's websocket policy protocol, both ways.

openpi (Physical-Intelligence/openpi) serves its policies with
``src/openpi/serving/websocket_policy_server.py``: on connect the server sends its metadata,
then each binary message from the client is an observation and each answer an action
dict, all packed with openpi-client's ``msgpack_numpy``; an error is sent as a text frame
(the traceback) and the connection closed with code 1011. Most public LIBERO and RoboTwin
evaluation clients speak exactly this.

* :mod:`.codec`: msgpack-numpy, decoded strictly (numeric arrays only, never pickle);
* :mod:`.layouts`: how a platform's observation is laid out in openpi's keys (a generic
  layout here; platform layouts come from plugins, e.g. ``wam-openpi`` for LIBERO and
  RoboTwin, through the ``wamcore.openpi_layouts`` entry-point group);
* :mod:`.server`: ``wam serve --protocol openpi``, serving any wamcore model to openpi
  clients (imports ``websockets``: ``pip install "wamcore[openpi]"``).

Nothing here is imported by ``import wamcore``; docs/openpi.md shows both uses.
"""
