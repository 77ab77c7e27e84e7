"""ScienceWorld: real-env adapter and server, WM prompt, local responder, rewards, dataset builders."""
