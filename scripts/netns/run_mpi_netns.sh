#!/usr/bin/env bash
# Runs an MPI program with one rank per network namespace on this machine (docs/architecture.md §6):
# namespaces joined by veth pairs on a private bridge, each veth shaped in the kernel with tc tbf
# (netem is unavailable on these kernels; added latency comes from motley's link emulation), and
# mpiexec launching across the namespaces over TCP. Everything it creates is removed on exit and on
# interruption (trap on EXIT, INT, TERM).
#
# Usage (as root; namespaces need CAP_NET_ADMIN):
#   scripts/netns/run_mpi_netns.sh [-n RANKS] [-r RATE] [-s SUBNET] -- PROGRAM [ARGS...]
#     -n RANKS   ranks = namespaces (default 2)
#     -r RATE    tbf rate of every veth, both directions, e.g. 1gbit, 200mbit (default 1gbit)
#     -s SUBNET  first three octets of the private /24 (default 10.77.0)
# mpiexec flags it passes, and why:
#   --allow-run-as-root      (root is needed for namespaces)
#   --oversubscribe          more ranks than the slots Open MPI detects
#   --bind-to none           do not pin ranks to cores (other jobs share the machine)
#   --mca btl self,tcp and btl_tcp_if_include / oob_tcp_if_include SUBNET.0/24: force traffic
#                            over the shaped veths (no shared memory between namespaces)
#   --mca plm_rsh_agent AGENT: "ssh" into a namespace = `ip netns exec NS sh -c CMD`
#   --mca mpi_yield_when_idle 1
set -euo pipefail

RANKS=2
RATE=1gbit
SUBNET=10.77.0
while getopts "n:r:s:" opt; do
  case "$opt" in
    n) RANKS=$OPTARG ;;
    r) RATE=$OPTARG ;;
    s) SUBNET=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
[[ $# -ge 1 ]] || { echo "usage: $0 [-n RANKS] [-r RATE] [-s SUBNET] -- PROGRAM [ARGS...]" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "$0: needs root (ip netns)" >&2; exit 2; }

TAG="mt$$"                      # unique per run; interface names stay under 15 characters
BRIDGE="${TAG}br"
WORK=$(mktemp -d)

cleanup() {
  set +e
  for ((i = 0; i < RANKS; i++)); do
    ip netns del "${TAG}ns$i" 2>/dev/null
    ip link del "${TAG}v$i" 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # replaced once mpiexec runs

ip link add "$BRIDGE" type bridge
ip addr add "$SUBNET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
: > "$WORK/hosts"
for ((i = 0; i < RANKS; i++)); do
  ns="${TAG}ns$i" host="${TAG}v$i" peer="${TAG}p$i" addr="$SUBNET.$((i + 2))"
  ip netns add "$ns"
  ip link add "$host" type veth peer name "$peer"
  ip link set "$peer" netns "$ns"
  ip link set "$host" master "$BRIDGE" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$addr/24" dev "$peer"
  ip netns exec "$ns" ip link set "$peer" up
  # tbf shapes egress: the namespace's side shapes what it sends, the host side what it receives.
  ip netns exec "$ns" tc qdisc add dev "$peer" root tbf rate "$RATE" burst 256kb latency 100ms
  tc qdisc add dev "$host" root tbf rate "$RATE" burst 256kb latency 100ms
  echo "$addr slots=1" >> "$WORK/hosts"
  echo "$addr $ns" >> "$WORK/map"
done

# The launch agent Open MPI calls as `AGENT HOST CMD...`: run CMD inside HOST's namespace.
cat > "$WORK/agent" <<AGENT
#!/bin/sh
host=\$1; shift
while [ "\$1" != "\${1#-}" ]; do shift; done   # drop ssh-style options if any
ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$WORK/map")
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$WORK/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpiexec --allow-run-as-root --hostfile "$WORK/hosts" -n "$RANKS" --oversubscribe --bind-to none \
  --mca plm_rsh_agent "$WORK/agent" --mca btl self,tcp \
  --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$SUBNET.0/24" \
  --mca mpi_yield_when_idle 1 "$@" &
MPIEXEC_PID=$!
# A signal to this script alone (not to its process group) must still stop the job: bash runs
# traps only between commands, so mpiexec runs in the background and we wait for it.
trap 'kill -TERM "$MPIEXEC_PID" 2>/dev/null; wait "$MPIEXEC_PID" 2>/dev/null; exit 130' INT TERM
status=0
wait "$MPIEXEC_PID" || status=$?
exit "$status"
