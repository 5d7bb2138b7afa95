"""The node-local record spool: the directory format (:mod:`.directory`), its ingest into
the history store (:mod:`.ingest`) and the node's detached ingest run (:mod:`.drain`)."""
