#!/bin/sh
# Guest payload for rxe-run --script: ibv_rc_pingpong server and client on the one rxe0 device,
# talking over 10.0.0.1 with RoCE v2 GID index 1. Extra arguments go to both sides.
#   tests/rxe/rxe-run --script tests/rxe/rc-pingpong.sh --with /usr/bin/ibv_rc_pingpong [-- -n 1000]
port=18515
ibv_rc_pingpong -d rxe0 -g 1 -p "$port" "$@" >/tmp/server.out 2>&1 &
server=$!

# Start the client once the server listens (it exchanges QP numbers over TCP first).
hexport=$(printf '%04X' "$port")
tries=100
until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ":$hexport [0-9A-F:]* 0A "; do
	tries=$((tries - 1))
	if [ "$tries" -le 0 ] || ! kill -0 "$server" 2>/dev/null; then
		echo "rc-pingpong: the server never listened on port $port" >&2
		cat /tmp/server.out >&2
		exit 1
	fi
	sleep 0.1
done

echo "--- client ---"
ibv_rc_pingpong -d rxe0 -g 1 -p "$port" "$@" 10.0.0.1
client=$?
wait "$server"
server_status=$?
echo "--- server ---"
cat /tmp/server.out
echo "client exit $client, server exit $server_status"
[ "$client" -eq 0 ] && [ "$server_status" -eq 0 ]
