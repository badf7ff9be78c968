#!/usr/bin/env bash
# A real OpenSSH server on 127.0.0.1 for the multi-node SSH-launcher tests.
# Idempotent: installs openssh-server if missing, makes host keys once, starts one sshd on the
# loopback port (default 2222, or $1) unless one already listens there, and prints the port.
# Only key logins are accepted (no passwords); the tests add and remove their own
# entry in /var/lib/trainwiz-sshd/authorized_keys (not ~/.ssh). Needs root (CI containers run as root).
set -euo pipefail
port=${1:-2222}
dir=/var/lib/trainwiz-sshd
# One caller at a time: pytest's workers each run this from their session fixture, and two of
# them on a fresh machine would race apt-get (dpkg's lock) and sshd's start.
mkdir -p "$dir"
exec 9>"$dir/.ci-sshd.lock"
flock 9
if [ ! -x /usr/sbin/sshd ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
fi
mkdir -p "$dir" /run/sshd
chmod 0755 /run/sshd
[ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/host_ed25519"
want=$(cat <<CONF
# written by trainwiz scripts/ci-sshd.sh
ListenAddress 127.0.0.1:$port
HostKey $dir/host_ed25519
PidFile $dir/sshd-$port.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
MaxStartups 50:30:100
MaxSessions 50
AuthorizedKeysFile .ssh/authorized_keys $dir/authorized_keys
CONF
)
touch "$dir/authorized_keys"
chmod 0644 "$dir/authorized_keys"
conf="$dir/sshd_config"
changed=0
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
    printf '%s\n' "$want" > "$conf"
    changed=1
fi
pidfile="$dir/sshd-$port.pid"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    if [ "$changed" = 1 ]; then kill -HUP "$(cat "$pidfile")"; sleep 0.5; fi
    echo "$port"; exit 0
fi
/usr/sbin/sshd -t -f "$conf"
/usr/sbin/sshd -f "$conf" </dev/null >/dev/null 2>&1  # never holds a caller's pipes
for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; exit 0; fi
    sleep 0.1
done
echo "sshd did not listen on 127.0.0.1:$port" >&2
exit 1
