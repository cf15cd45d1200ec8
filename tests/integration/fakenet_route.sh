#!/bin/sh
# fakenet_route.sh add|del GATEWAY — routes the fake internet's servers (203.0.113.10 and
# 203.0.113.66, the only addresses its namespace holds) to GATEWAY (the test namespace's end
# of its veth), or removes those routes.
#
# Host routes, not the whole 203.0.113.0/24: some machines reach their package registries at
# another address in that very TEST-NET range (through /etc/hosts or their resolver). While a
# test held the /24, such an address was routed into the test's namespace and every download
# on the host (a venv or node_modules made by a test) hung.
set -u
op=$1 gw=$2
servers="203.0.113.10 203.0.113.66"
case "$op" in
add)
  for a in $servers; do ip route replace "$a/32" via "$gw"; done
  ;;
del)
  for a in $servers; do ip route del "$a/32" via "$gw" 2>/dev/null; done
  ;;
esac
exit 0
