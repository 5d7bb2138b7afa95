"""The nightly retrain: records -> episodes -> fitted scores -> a validated score set
published atomically (:mod:`.retrain`), one run at a time (:mod:`.lock`)."""
