# slurm-colo inside a version lab (sourced by up.sh SUITE --colo, after common.sh).
# Mirrors contrib/lab/single/up.sh for the host's 22.05 lab, with everything inside the chroot:
# a venv made by the chroot's own python3 holding slurm-colo installed from this checkout,
# the SPANK plugin built against the chroot's Slurm headers (`slurm-colo install spank`),
# job_submit.lua, gres.conf, hooks.env and the hook shims from `slurm-colo install --write`,
# the MPS emulator wrapper and NVML scenario, a score set, and the agent started inside the
# lab's namespaces. Paths inside the chroot are those of the host lab's venv and config.
REPO=$(cd "$HERE/../../.." && pwd)
. "$REPO/contrib/lab/colo-lib.sh"
CLAB=/opt/slurm-colo-lab         # inside the chroot: state, libexec, logs (host lab: LAB_DIR)
CVENV=$CLAB/venv
CSRC=/opt/slurm-colo-src         # the copy of this checkout that pip installs from
CCONF=/etc/slurm-colo/config.toml

# in_chroot CMD...: run CMD in the chroot, with the host's network (pip) but in a private mount
# namespace holding its /proc and /dev (nothing is mounted in the host's mount namespace).
# The host's CA bundle, when it has one, is copied in for pip (TLS may be intercepted on the
# way to PyPI); without it pip uses its own.
in_chroot() {
  local cert=SLURM_COLO_LAB=1   # (a placeholder when there is no CA bundle)
  [ -s "$DIR/etc/slurm-colo-ca.crt" ] && cert=PIP_CERT=/etc/slurm-colo-ca.crt
  unshare --mount --propagation private -- /bin/sh -c '
    d=$1; shift
    mount -t proc proc "$d/proc" && mount --rbind /dev "$d/dev" || exit 1
    exec chroot "$d" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 SLURM_COLO_CONFIG='"$CCONF"' "$@"' \
    sh "$DIR" "$cert" "$@"
}

# the checkout's files that pip installs (the package, with the SPANK source and the shims in
# slurm_colo/data), and a digest of their contents: any other change needs no reinstall
colo_sources() {
  git -C "$REPO" ls-files -z --cached --others --exclude-standard -- slurm_colo pyproject.toml README.md
}
colo_digest() {
  (cd "$REPO" && colo_sources | tar -c --null -T - --sort=name --mtime=@0 --owner=0 --group=0 \
    --numeric-owner -f -) | sha256sum | cut -d' ' -f1
}

# colo_users: the lab's users alice and bob, as in the host lab (contrib/lab/single/up.sh), with the
# host's uids when the host has them (1001 and 1002 otherwise): files they write under
# /opt/slurm-colo-lab/out then show the same owners from both sides.
colo_users() {
  local u uid fallback=1001
  for u in alice bob; do
    uid=$(id -u "$u" 2>/dev/null || echo $fallback)
    fallback=$((fallback + 1))
    chroot "$DIR" id -u "$u" >/dev/null 2>&1 && continue
    if chroot "$DIR" getent passwd "$uid" >/dev/null; then   # taken: any free uid
      chroot "$DIR" useradd -m -U -s /bin/bash "$u"
    else
      chroot "$DIR" useradd -m -u "$uid" -U -s /bin/bash "$u"
    fi
  done
}

# colo_install: install slurm-colo into the chroot; sets JOB_SUBMIT_LUA, GRES_CONF, NODE_GRES
# and COLO_HOOKS for the Slurm config written by up.sh. COLO_REINSTALLED=1 when the package
# changed (a running agent is then restarted).
colo_install() {
  local digest c=$DIR$CLAB py
  COLO_REINSTALLED=0
  colo_users
  local ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  if [ -s "$ca" ]; then install -m 0644 "$ca" "$DIR/etc/slurm-colo-ca.crt"; else rm -f "$DIR/etc/slurm-colo-ca.crt"; fi
  install -d -m 0755 "$DIR/etc/slurm-colo" "$c" "$c/state" "$c/spool" "$c/libexec" "$c/install"
  install -d -m 1777 "$c/out"
  colo_config "$CLAB" "$NODE" 4 0-1 > "$DIR$CCONF"
  digest=$(colo_digest)
  if [ ! -x "$DIR$CVENV/bin/python" ]; then
    in_chroot python3 -m venv "$CVENV"
    in_chroot "$CVENV/bin/pip" install -q --upgrade pip >/dev/null
  fi
  if [ "$(cat "$DIR$CVENV/.installed" 2>/dev/null)" != "$digest" ]; then
    rm -rf "$DIR$CSRC"; mkdir -p "$DIR$CSRC"
    (cd "$REPO" && colo_sources | tar -c --null -T - -f -) | tar -x -C "$DIR$CSRC" -f -
    in_chroot "$CVENV/bin/pip" install -q "$CSRC" >/dev/null
    # the plugin is built against this chroot's Slurm headers, with the chroot's gcc
    in_chroot "$CVENV/bin/slurm-colo" install spank --prefix "$CLAB" >/dev/null
    echo "$digest" > "$DIR$CVENV/.installed"
    COLO_REINSTALLED=1
  fi
  log "slurm-colo $(in_chroot "$CVENV/bin/python" -c 'import slurm_colo, sys; print(slurm_colo.__version__, "python", sys.version.split()[0])') in $CVENV$([ $COLO_REINSTALLED = 1 ] && echo ' (installed)')"
  # the snippets a site merges by hand, rendered by slurm-colo itself
  rm -rf "$c/install"
  in_chroot "$CVENV/bin/slurm-colo" install --write "$CLAB/install" >/dev/null
  for h in prolog epilog taskprolog taskepilog; do install -m 0755 "$c/install/slurm-colo-$h" "$c/libexec/"; done
  install -m 0644 "$c/install/hooks.env" "$DIR/etc/slurm-colo/hooks.env"
  install -m 0644 "$REPO/contrib/lab/nvml-scenario.json" "$c/libexec/"
  py=$(in_chroot "$CVENV/bin/python" -c 'import slurm_colo.emulators.mps_control as m; print(m.__file__)')
  colo_mps_wrapper "$CVENV/bin/python" "$py" > "$c/libexec/nvidia-cuda-mps-control"
  chmod 0755 "$c/libexec/nvidia-cuda-mps-control"
  install -d "$DIR/etc/slurm/plugstack.conf.d"
  echo 'include /etc/slurm/plugstack.conf.d/*.conf' > "$DIR/etc/slurm/plugstack.conf"
  echo "optional $CLAB/colocate.so" > "$DIR/etc/slurm/plugstack.conf.d/slurm-colo.conf"
  colo_seed_scores "$c" in_chroot "$CVENV/bin/slurm-colo"
  JOB_SUBMIT_LUA=$c/install/job_submit.lua
  GRES_CONF=$c/install/gres.conf.snippet
  # the layout's Gres=, unless the caller gives one (a test of a Gres= in another order)
  NODE_GRES=${NODE_GRES:-$(in_chroot "$CVENV/bin/python" -c 'from slurm_colo.config import load_config as l; print(l().gpus[0].node_gres())')}
  COLO_HOOKS=$CLAB/libexec
  log "config $CCONF, scores $CLAB/state/scores.json, plugin $CLAB/colocate.so, node Gres=$NODE_GRES"
}

# colo_start_agent: start the agent inside the lab's namespaces (restarted when reinstalled)
colo_start_agent() {
  local X="$HERE/exec.sh"
  "$X" "$SUITE" install -d -m 0755 /run/slurm-colo
  if [ "${COLO_REINSTALLED:-0}" = 1 ]; then
    "$X" "$SUITE" /bin/sh -c "[ -s $CLAB/agent.pid ] && kill \$(cat $CLAB/agent.pid) 2>/dev/null; sleep 0.5; rm -f $CLAB/agent.pid" || true
  fi
  if ! "$X" "$SUITE" /bin/sh -c "[ -s $CLAB/agent.pid ] && kill -0 \$(cat $CLAB/agent.pid) 2>/dev/null"; then
    "$X" "$SUITE" /bin/sh -c "SLURM_COLO_CONFIG=$CCONF setsid nohup $CVENV/bin/slurm-colo agent >>$CLAB/agent.log 2>&1 </dev/null & echo \$! > $CLAB/agent.pid"
  fi
  local ok=0
  for _ in $(seq 1 100); do
    "$X" "$SUITE" env SLURM_COLO_CONFIG=$CCONF "$CVENV/bin/python" -c 'from slurm_colo.contracts.client import ping; from slurm_colo.config import load_config; import sys; sys.exit(0 if ping(load_config()) else 1)' 2>/dev/null && { ok=1; break; }
    sleep 0.2
  done
  [ $ok -eq 1 ] || { echo "up: the agent does not answer; $DIR$CLAB/agent.log:" >&2; tail -20 "$DIR$CLAB/agent.log" >&2; exit 1; }
  log "agent pid $(cat "$DIR$CLAB/agent.pid") (in the lab) on /run/slurm-colo/agent.sock"
}
