"""The placement agent: a long-running daemon answering placement requests from the Lua
hook and job start/end events from the node hooks, over one unix socket."""
