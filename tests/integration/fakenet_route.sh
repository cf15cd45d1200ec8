#!/bin/sh
# fakenet_route.sh add|del GATEWAY — routes the fake internet's 203.0.113.0/24 to GATEWAY (the
# test namespace's end of its veth), or removes that route.
#
# Some machines reach their package registries at an address in that very TEST-NET range
# (through /etc/hosts). While a test's fake internet holds the /24, such an address would be
# routed into the test's namespace and every download on the host would hang. So each
# address in the range that /etc/hosts names keeps the route it had, as a /32 that wins over
# the /24, and `del` removes those too.
set -u
op=$1 gw=$2
keep=$(awk '$1 ~ /^203\.0\.113\.[0-9]+$/ {print $1}' /etc/hosts 2>/dev/null | sort -u)
case "$op" in
add)
  for a in $keep; do
    r=$(ip -4 route get "$a" 2>/dev/null | head -n1)
    via=$(echo "$r" | sed -n 's/.* via \([0-9.]*\).*/\1/p')
    dev=$(echo "$r" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
    [ -n "$dev" ] || continue
    if [ -n "$via" ]; then
      ip route replace "$a/32" via "$via" dev "$dev"
    else
      ip route replace "$a/32" dev "$dev"
    fi
  done
  ip route add 203.0.113.0/24 via "$gw"
  ;;
del)
  ip route del 203.0.113.0/24 via "$gw" 2>/dev/null
  for a in $keep; do ip route del "$a/32" 2>/dev/null; done
  ;;
esac
exit 0
