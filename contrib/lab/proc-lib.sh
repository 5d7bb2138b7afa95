# Process checks shared by the labs' scripts (single-node and multi-node), always by pid,
# never by process name. Sourced; defines functions only.

# lab_running PID: the process exists and is not a zombie (init here may not reap daemons).
# Its state is read once: a process reaped between a check and the read counts as gone.
lab_running() {
  [ -n "$1" ] || return 1
  local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ]
}

# lab_pidfile_alive PIDFILE: the file names a running process
lab_pidfile_alive() { [ -s "$1" ] && lab_running "$(cat "$1")"; }

# lab_stop PIDFILE: TERM the process the file names, wait up to 10 s, then KILL; remove the file
lab_stop() {
  local p=$1 pid
  [ -s "$p" ] || return 0
  pid=$(cat "$p")
  if lab_running "$pid"; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do lab_running "$pid" || break; sleep 0.2; done
    if lab_running "$pid"; then kill -9 "$pid" 2>/dev/null; echo "killed $pid ($p)"; else echo "stopped $pid ($p)"; fi
  fi
  rm -f "$p"
}
