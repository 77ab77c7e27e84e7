"""ALFWorld: games offline, the real env, the simulator (tracker, responder, reward), datasets."""
