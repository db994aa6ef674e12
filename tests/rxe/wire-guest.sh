#!/bin/sh
# Guest part of wire-compare.sh (rxe-run --script, with --modules "veth act_pedit act_mirred
# cls_matchall sch_ingress" and tcpdump, tc and the program copied in):
#   wire-guest.sh PROGRAM [ARGS...]
# runs PROGRAM --sgid-a A --sgid-b B [ARGS...] on an rxe0 whose packets cross a wire tcpdump
# sees, and prints the program's output, then the capture as hex between "== pcap" and "== end".
#
# Two QPs of one rxe device reach each other through rxe's internal loopback when the
# destination MAC is the netdev's own (rxe_prepare() in rxe_net.c), and nothing reaches the
# netdev. So:
#  - rxe0 sits on veth0, which has two addresses (10.0.0.1, 10.0.0.2: GIDs of rxe0); each QP
#    uses one and addresses the other's;
#  - locally made packets to 10.0.0.0/24 are routed out of veth0 (an "iif lo" rule before the
#    local table), to a static neighbour whose MAC is veth1's: not rxe0's own MAC, so rxe sends
#    the packet through the IP stack instead of looping it back;
#  - veth1's ingress rewrites the destination MAC to veth0's and sends the frame back out of
#    veth1, so it arrives at veth0 as if from a peer; accept_local lets veth0 take packets from
#    its own addresses.
# tcpdump on veth0, outgoing only, sees every packet once.
set -e
mac0=02:00:00:00:00:01
mac1=02:00:00:00:00:02
step() {
	"$@" || {
		echo "wire-guest: failed: $*" >&2
		exit 125
	}
}
rdma link delete rxe0 2>/dev/null || true
step ip link add veth0 address $mac0 type veth peer name veth1 address $mac1
step ip addr add 10.0.0.1/24 dev veth0
step ip addr add 10.0.0.2/24 dev veth0
step ip link set veth0 up
step ip link set veth1 up
for k in all/rp_filter veth0/rp_filter; do echo 0 >/proc/sys/net/ipv4/conf/$k; done
for k in all/accept_local veth0/accept_local; do echo 1 >/proc/sys/net/ipv4/conf/$k; done
step ip rule add pref 10 iif lo to 10.0.0.0/24 lookup 100
step ip rule add pref 200 lookup local
step ip rule del pref 0 lookup local
step ip route add 10.0.0.0/24 dev veth0 table 100
step ip neigh add 10.0.0.1 lladdr $mac1 dev veth0 nud permanent
step ip neigh add 10.0.0.2 lladdr $mac1 dev veth0 nud permanent
step tc qdisc add dev veth1 ingress
step tc filter add dev veth1 parent ffff: matchall \
	action pedit ex munge eth dst set $mac0 pipe action mirred egress redirect dev veth1
step rdma link add rxe0 type rxe netdev veth0

# The RoCE v2 GID indexes of the two addresses.
gids=/sys/class/infiniband/rxe0/ports/1
find_gid() { # IPV4_HEX: the index of ::ffff:<ip> (RoCE v2)
	tries=100
	while [ "$tries" -gt 0 ]; do
		for g in "$gids"/gids/*; do
			i=${g##*/}
			[ "$(cat "$g" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$1" ] || continue
			[ "$(cat "$gids/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
			echo "$i"
			return 0
		done
		tries=$((tries - 1))
		sleep 0.1
	done
	echo "wire-guest: no RoCE v2 GID ::ffff:$1 on rxe0" >&2
	exit 125
}
gid_a=$(find_gid 0a00:0001)
gid_b=$(find_gid 0a00:0002)

# A short snapshot length and a larger buffer: with the default 256 KiB slots the ring holds
# only a few frames, and a burst while the emulated guest is slow to schedule tcpdump was
# "dropped by kernel".
tcpdump -Z root -i veth0 -Q out --immediate-mode -U -s 2048 -B 8192 -w /tmp/wire.pcap \
	udp port 4791 \
	2>/tmp/tcpdump.err &
tcpdump=$!
# tcpdump says "listening" once its socket is open.
tries=100
until grep -q listening /tmp/tcpdump.err 2>/dev/null; do
	tries=$((tries - 1))
	[ "$tries" -gt 0 ] || { cat /tmp/tcpdump.err >&2; exit 125; }
	sleep 0.1
done
prog=$1
shift
status=0
"$prog" --sgid-a "$gid_a" --sgid-b "$gid_b" "$@" || status=$?
# Let tcpdump write what it has read (under emulation it lags), then stop it.
sleep 3
kill -INT "$tcpdump"
wait "$tcpdump" || true
cat /tmp/tcpdump.err >&2
echo "== pcap"
od -An -tx1 -v /tmp/wire.pcap | tr -d ' \n'
echo
echo "== end"
exit "$status"
