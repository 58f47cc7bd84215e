# Sourced by deploy/bench/proxies.sh and call-instructions.sh: the one
# HAProxy configuration both benchmarks measure, so that their figures
# are of the same proxy.

# Prints HAProxy's configuration: one thread, HTTP/2 (h2c) both sides,
# listening on 127.0.0.1:PORT, forwarding to 127.0.0.1:UP_PORT. EXTRA:
# further global settings (proxies.sh's -64k variant's buffer size).
haproxy_config() {
    local port=$1 up_port=$2 extra=${3:-}
    cat <<CFG
global
    nbthread 1
    maxconn 4096
$extra
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend bench
    bind 127.0.0.1:$port proto h2
    default_backend nghttpd
backend nghttpd
    server s 127.0.0.1:$up_port proto h2
CFG
}
