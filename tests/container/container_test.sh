#!/usr/bin/env bash
# Container test (CTest label `container`): builds the Dockerfile's Debian-only
# variant (VARIANT=debian, CPU backend) with podman and runs it for real:
#   1. image: runtime stage holds no compiler, headers, sources or build tree;
#      HEALTHCHECK, non-root user, ports and entrypoint are in its config;
#   2. server container with the bundled tiny model mounted read-only: waits for
#      the HEALTHCHECK, sends an image+text request and scrapes /metrics through
#      the published ports, checks the server runs as the non-root user;
#   3. SIGTERM (`podman stop`) with a request in flight: the drain finishes it;
#   4. deploy/docker-compose.yml under podman-compose: server + Prometheus
#      scraping it over the compose network, a PromQL query of the Grafana
#      dashboard answered (Grafana itself has no Debian package: not started).
#
#   tests/container/container_test.sh [HOST_VISMOE_CLI]
#
# HOST_VISMOE_CLI: the host's built vismoe-cli (CTest passes it); without it the
# image's own vismoe-cli runs in a host-network container, still through the
# published ports. Exits 77 (CTest: Skipped) when podman & co. are missing;
# install them with deploy/install-container-deps.sh. Needs root (debootstrap
# makes the base image; no registry is assumed reachable).
# VISMOE_CONTAINER_LOGS=DIR keeps the build, podman and server logs there (podman
# 4.3 logs an error per `run` without systemd: healthchecks are run on demand here).
# VISMOE_CONTAINER_CACHE=1 keeps the build's intermediate layers as a cache for
# the next run (by default nothing the test built is left behind but the base).
set -euo pipefail

readonly SKIP=77
src=$(cd "$(dirname "$0")/../.." && pwd)
host_cli="${1:-}"
t0=$SECONDS

skip() { echo "SKIPPED: $*"; exit "$SKIP"; }
fail() { echo "FAILED: $*" >&2; exit 1; }
step() { echo "== [$((SECONDS - t0)) s] $*"; }

missing=()
for tool in podman runc debootstrap podman-compose netavark curl; do
  if ! command -v "$tool" >/dev/null 2>&1 && [[ ! -x /usr/lib/podman/$tool ]]; then
    missing+=("$tool")
  fi
done
if ((${#missing[@]} > 0)); then
  skip "container tools not installed: ${missing[*]} (install them with deploy/install-container-deps.sh)"
fi
if [[ $(id -u) -ne 0 ]]; then
  skip "needs root (debootstrap for the base image, rootful podman)"
fi
if [[ -n "$host_cli" && ! -x "$host_cli" ]]; then
  fail "host vismoe-cli not executable: $host_cli"
fi

work=$(mktemp -d -t vismoe-container-test.XXXXXX)
logs="${VISMOE_CONTAINER_LOGS:-$work/logs}"
mkdir -p "$logs"
tag="ctest-$$"
image="localhost/vismoe-server:$tag"
prom_image="localhost/vismoe-prometheus:$tag"
ctr="vismoe-ctest-$$"
project="vismoe-ctest-$$"
base=localhost/debian:12-slim

# Podman settings that work in sandboxed CI machines and on ordinary hosts alike:
# no default ulimits (some sandboxes refuse setrlimit), runc (crun refuses a
# hybrid cgroup layout), cgroupfs (no systemd), netavark (its aardvark-dns lets
# compose services reach each other by name; bookworm's CNI has no DNS plugin).
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"

[network]
network_backend = "netavark"
EOF
export CONTAINERS_CONF="$work/containers.conf"

compose=(podman-compose -p "$project" -f "$src/deploy/docker-compose.yml")
cleanup() {
  local rc=$? ids
  set +e
  [[ -z "${cli_pid:-}" ]] || kill "$cli_pid" 2>/dev/null
  podman rm -f -t 0 "$ctr" >/dev/null 2>&1
  if [[ -n "${compose_up:-}" ]]; then
    "${compose[@]}" down -v >"$logs/compose-down.log" 2>&1
    mapfile -t ids < <(podman ps -aq --filter "label=io.podman.compose.project=$project")
    ((${#ids[@]} == 0)) || podman rm -f -t 0 "${ids[@]}" >/dev/null 2>&1
    mapfile -t ids < <(podman volume ls -q --filter "label=io.podman.compose.project=$project")
    ((${#ids[@]} == 0)) || podman volume rm -f "${ids[@]}" >/dev/null 2>&1
    podman network rm -f "${project}_default" >/dev/null 2>&1
  fi
  if [[ "${VISMOE_CONTAINER_CACHE:-0}" == 1 ]]; then
    podman untag "$image" >/dev/null 2>&1; podman untag "$prom_image" >/dev/null 2>&1
  elif [[ -f "$work/images-before" ]]; then
    podman rmi -f "$image" "$prom_image" >/dev/null 2>&1
    mapfile -t ids < <(podman images -aq --no-trunc | sort -u | comm -13 "$work/images-before" -)
    ((${#ids[@]} == 0)) || podman rmi -f "${ids[@]}" >/dev/null 2>&1
  fi
  ((rc == 0)) || echo "logs: $logs"
  # After a failure $work is kept when it holds the logs.
  if ((rc == 0)) || [[ -n "${VISMOE_CONTAINER_LOGS:-}" ]]; then rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
# CTest's timeout and Ctrl-C end the script through the EXIT trap, so it cleans up.
trap 'exit 143' TERM
trap 'exit 130' INT

# Port that nothing listens on now (published ports of the compose services).
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  fail "no free port found"
}

# vismoe-cli: the host's binary, or the image's in a host-network container.
cli() {
  if [[ -n "$host_cli" ]]; then
    "$host_cli" "$@"
  else
    podman run --rm --network=host -v "$src/tests/fixtures:$src/tests/fixtures:ro" \
      --entrypoint vismoe-cli "$image" "$@"
  fi
}
demo_image="$src/tests/fixtures/golden/images/demo.jpg"
model_dir="$src/tests/fixtures/tiny-qwen3-vl-moe"

metric() {  # metric PORT NAME_AND_LABELS -> value of that sample (empty if absent)
  local text
  text=$(curl -fsS --max-time 5 "http://127.0.0.1:$1/metrics") || return 0
  awk -v m="$2" '$1 == m {v = $2} END {print v}' <<<"$text"
}

wait_healthy() {  # wait_healthy CONTAINER GRPC_PORT
  local deadline=$((SECONDS + 300))
  until podman healthcheck run "$1" >/dev/null 2>&1; do
    if [[ $(podman inspect -f '{{.State.Status}}' "$1") != running ]]; then
      podman logs "$1" 2>&1 | tail -n 40
      fail "container $1 exited before it was healthy"
    fi
    ((SECONDS < deadline)) || { podman logs "$1" 2>&1 | tail -n 40; fail "$1 not healthy after 300 s"; }
    sleep 1
  done
  # The same from the host, through the published port.
  cli health --server="127.0.0.1:$2" --connect_timeout=5s --timeout=5s ||
    fail "HEALTHCHECK passed inside $1 but vismoe-cli health on 127.0.0.1:$2 failed"
}

json_field() {  # json_field FILE KEY -> first scalar value of "KEY" (compact JSON)
  grep -o "\"$2\":[^,}]*" "$1" | sed -n '1{s/^[^:]*://;s/"//g;p}'
}

# ---------------------------------------------------------------------------
step "base image $base"
tests_dir="$src/tests/container"
bash "$tests_dir/make_base_image.sh"

step "building the Debian-only image (VARIANT=debian) -> $image; log: $logs/build.log"
# docker format: OCI image configs have no HEALTHCHECK. Host network: RUN apt-get
# reaches the host's Debian mirror even where container networking is limited.
# Images made from here on (the builder stage's layers stay behind as untagged
# images) are removed at exit, unless VISMOE_CONTAINER_CACHE=1. Not --layers=false:
# podman 4.3 then fails multi-stage builds at the end ("identifier is not an image").
podman images -aq --no-trunc | sort -u >"$work/images-before"
build_start=$SECONDS
if ! nice -n 10 podman build --format docker --network=host \
    --build-arg DEBIAN_IMAGE="$base" --build-arg VARIANT=debian \
    -t "$image" "$src" >"$logs/build.log" 2>&1; then
  tail -n 60 "$logs/build.log"
  fail "image build failed"
fi
build_s=$((SECONDS - build_start))
size=$(podman image inspect -f '{{.Size}}' "$image")
echo "built in ${build_s} s; image size $((size / 1000000)) MB"

step "image contents and config"
# shellcheck disable=SC2016  # expanded by the container's shell
podman run --rm --network=none --entrypoint /bin/sh "$image" -c '
  found=""
  for t in c++ g++ gcc cc clang cmake ninja make ld as protoc nvcc; do
    command -v "$t" >/dev/null 2>&1 && found="$found $t"
  done
  for d in /src /build /usr/include/c++ /usr/include/grpcpp /usr/include/opencv4 /usr/local/cuda; do
    [ -e "$d" ] && found="$found $d"
  done
  if [ -n "$found" ]; then echo "runtime image holds build tools or trees:$found"; exit 1; fi
  vismoe-server --help >/dev/null && vismoe-cli --help >/dev/null' 2>>"$logs/podman.log" ||
  { tail -n 5 "$logs/podman.log"; fail "runtime stage is not clean (or its binaries do not run)"; }
# (The healthcheck is not part of `{{json .Config}}` in podman 4.3's output.)
config=$(podman image inspect -f '{{json .Config}}' "$image")
config+=$(podman inspect -t image -f '{{json .Config.Healthcheck}}' "$image")
for want in '"User":"vismoe:vismoe"' '"50051/tcp"' '"8000/tcp"' '"9464/tcp"' '"Entrypoint":["vismoe-server"]' \
    '{"Test":["CMD","vismoe-cli","health","--server=127.0.0.1:50051"'; do
  grep -qF "$want" <<<"$config" || fail "image config lacks $want (HEALTHCHECK needs --format docker): $config"
done

# ---------------------------------------------------------------------------
step "server container $ctr (tiny model mounted read-only)"
# The demo's offload settings with a slow copy engine, so that a longer request
# is certainly still running when SIGTERM arrives; the drain has time to finish it.
podman run -d --name "$ctr" -p 127.0.0.1::50051 -p 127.0.0.1::8000 -p 127.0.0.1::9464 \
  -v "$model_dir:/models/model:ro" "$image" \
  --model=/models/model --listen=0.0.0.0:50051 --http_listen=0.0.0.0:8000 \
  --metrics_listen=0.0.0.0:9464 \
  --gpu_memory_budget=12.5MB --max_context_tokens=4096 --pinned_layers=1 \
  --copy_bandwidth=20MB --drain_timeout=120s >/dev/null 2>>"$logs/podman.log" ||
  { tail -n 5 "$logs/podman.log"; fail "podman run failed"; }
grpc_port=$(podman port "$ctr" 50051/tcp | sed -n '1s/.*://p')
metrics_port=$(podman port "$ctr" 9464/tcp | sed -n '1s/.*://p')
http_port=$(podman port "$ctr" 8000/tcp | sed -n '1s/.*://p')
echo "published: gRPC 127.0.0.1:$grpc_port, HTTP 127.0.0.1:$http_port, metrics 127.0.0.1:$metrics_port"
wait_healthy "$ctr" "$grpc_port"

step "non-root server process"
uid_line=$(podman exec "$ctr" cat /proc/1/status | awk '/^Uid:/')
read -r _ ruid euid _ <<<"$uid_line"
[[ $ruid == 10001 && $euid == 10001 ]] || fail "server process runs as uid $ruid/$euid, not vismoe (10001)"
[[ $(podman exec "$ctr" cat /proc/1/comm) == vismoe-server ]] || fail "PID 1 is not vismoe-server"

step "image + text request through the published port"
cli --server="127.0.0.1:$grpc_port" --image="$demo_image" \
  --prompt="Describe this picture in one sentence." --max_new_tokens=8 --json >"$work/answer.json" ||
  fail "request failed"
cat "$work/answer.json"; echo
finish=$(json_field "$work/answer.json" finish_reason)
[[ $finish == length || $finish == stop ]] || fail "finish_reason '$finish'"
completion=$(json_field "$work/answer.json" completion_tokens)
visual=$(json_field "$work/answer.json" visual_tokens_before)
((completion > 0)) || fail "no tokens generated"
((visual > 0)) || fail "the image gave no visual tokens"

step "OpenAI-compatible chat completion through the published HTTP port"
{
  printf '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,'
  base64 -w0 "$demo_image"
  printf '"}}, {"type": "text", "text": "Describe this picture in one sentence."}]}], "max_tokens": 8}'
} >"$work/chat.json"
curl -fsS --max-time 120 -H 'Content-Type: application/json' --data-binary "@$work/chat.json" \
  "http://127.0.0.1:$http_port/v1/chat/completions" >"$work/chat_answer.json" ||
  fail "HTTP chat completion failed"
grep -q '"object":"chat.completion"' "$work/chat_answer.json" ||
  fail "not a chat completion: $(head -c 300 "$work/chat_answer.json")"
grep -q '"completion_tokens":[1-9]' "$work/chat_answer.json" ||
  fail "no tokens generated over HTTP: $(head -c 300 "$work/chat_answer.json")"
head -c 300 "$work/chat_answer.json"; echo

step "/metrics through the published port"
ok=$(metric "$metrics_port" 'vismoe_requests_total{api="grpc",status="ok"}')
if [[ -z $ok ]] || (($(printf '%.0f' "$ok") < 1)); then
  fail "vismoe_requests_total{api=\"grpc\",status=\"ok\"} is '$ok'"
fi
curl -fsS "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt" || fail "cannot scrape /metrics"
grep -q '^vismoe_expert_cache_queries_total{' "$work/metrics.txt" || fail "no expert cache counters in /metrics"
echo "vismoe_requests_total{api=\"grpc\",status=\"ok\"} $ok"

step "SIGTERM with a request in flight (podman stop)"
drain_tokens=256
cli --server="127.0.0.1:$grpc_port" --image="$demo_image" --prompt="Describe this picture." \
  --max_new_tokens=$drain_tokens --json >"$work/drain.json" 2>"$work/drain.err" &
cli_pid=$!
deadline=$((SECONDS + 120))
until [[ $(metric "$metrics_port" vismoe_running_requests) == 1 ]]; do
  kill -0 "$cli_pid" 2>/dev/null || { cat "$work/drain.err"; fail "request ended before it was seen running"; }
  ((SECONDS < deadline)) || fail "request not running after 120 s"
  sleep 0.2
done
stop_ns=$(date +%s%N)
podman stop -t 150 "$ctr" >/dev/null 2>>"$logs/podman.log"
cli_rc=0
wait "$cli_pid" || cli_rc=$?
cli_pid=""  # reaped: cleanup must not signal whatever gets the pid next
done_ns=$(date +%s%N)
podman logs "$ctr" >"$logs/server.log" 2>&1
cat "$work/drain.err"
((cli_rc == 0)) || { tail -n 20 "$logs/server.log"; fail "in-flight request failed (vismoe-cli exit $cli_rc)"; }
drained=$(json_field "$work/drain.json" completion_tokens)
[[ $drained == "$drain_tokens" ]] || fail "drained request returned $drained tokens, not $drain_tokens"
[[ $(json_field "$work/drain.json" finish_reason) == length ]] || fail "drained request did not finish by length"
grep -q 'received SIGTERM' "$logs/server.log" || fail "server log does not show SIGTERM"
grep -q 'shutdown complete' "$logs/server.log" || fail "server log does not show a finished drain"
if grep -q 'drain timeout' "$logs/server.log"; then fail "drain timed out"; fi
# The server's own word: a request finished OK after SIGTERM, before shutdown completed.
drain_log=$(sed -n '/received SIGTERM/,/shutdown complete/p' "$logs/server.log")
grep -q 'request .* ok:' <<<"$drain_log" || fail "server log shows no request completed during the drain"
code=$(podman inspect -f '{{.State.ExitCode}}' "$ctr")
((code == 0)) || fail "server exited with $code after SIGTERM"
echo "in-flight request completed with $drained tokens; podman stop (SIGTERM, drain, exit 0) took $(((done_ns - stop_ns) / 1000000)) ms"
echo "$drain_log"
podman rm -f "$ctr" >/dev/null 2>>"$logs/podman.log"

# ---------------------------------------------------------------------------
step "deploy/docker-compose.yml: vismoe + prometheus (podman-compose)"
nice -n 10 podman build --format docker --network=host --build-arg DEBIAN_IMAGE="$base" \
  -t "$prom_image" -f "$tests_dir/prometheus.Containerfile" "$tests_dir" >"$logs/prometheus-build.log" 2>&1 ||
  { tail -n 30 "$logs/prometheus-build.log"; fail "Prometheus image build failed"; }
VISMOE_GRPC_PORT=$(free_port); VISMOE_METRICS_PORT=$(free_port); PROMETHEUS_PORT=$(free_port)
export VISMOE_GRPC_PORT VISMOE_METRICS_PORT PROMETHEUS_PORT
export VISMOE_VARIANT=debian DEBIAN_IMAGE="$base" VISMOE_IMAGE="$image" \
  PROMETHEUS_IMAGE="$prom_image" MODEL_DIR="$model_dir"
compose_up=1
# Only these two: grafana/grafana has no Debian package and no registry is assumed.
# The vismoe image exists already, so compose does not build it again.
"${compose[@]}" up -d vismoe prometheus >"$logs/compose-up.log" 2>&1 ||
  { cat "$logs/compose-up.log"; fail "podman-compose up failed"; }
vismoe_ctr=$(podman ps -q --filter "label=io.podman.compose.project=$project" \
  --filter "label=com.docker.compose.service=vismoe")
[[ -n $vismoe_ctr ]] || { cat "$logs/compose-up.log"; fail "compose started no vismoe container"; }
wait_healthy "$vismoe_ctr" "$VISMOE_GRPC_PORT"

prom="http://127.0.0.1:$PROMETHEUS_PORT"
deadline=$((SECONDS + 120))
until grep -q '"health":"up"' <<<"$(curl -fsS --max-time 5 "$prom/api/v1/targets" 2>/dev/null)"; do
  if ((SECONDS >= deadline)); then
    curl -sS "$prom/api/v1/targets" || true
    "${compose[@]}" logs prometheus 2>&1 | tail -n 30
    fail "Prometheus target vismoe:9464 not up after 120 s"
  fi
  sleep 1
done
echo "Prometheus scrapes vismoe:9464 (target up)"
rules=$(curl -fsS "$prom/api/v1/rules") || fail "Prometheus /api/v1/rules failed"
grep -q '"type":"alerting"' <<<"$rules" || fail "Prometheus loaded no alert rules from deploy/prometheus/alerts.yml"
for _ in 1 2; do
  cli --server="127.0.0.1:$VISMOE_GRPC_PORT" --image="$demo_image" --prompt="What is this?" \
    --max_new_tokens=8 >/dev/null 2>&1 || fail "request to the compose service failed"
done
# The dashboard's "expert cache hit ratio" panel, $__rate_interval = 1m. Rates
# need a scrape after the requests (scrape_interval 5s).
query='sum(rate(vismoe_expert_cache_hits_total[1m])) / sum(rate(vismoe_expert_cache_queries_total[1m]))'
deadline=$((SECONDS + 60))
while :; do
  answer=$(curl -fsS --max-time 5 "$prom/api/v1/query" --data-urlencode "query=$query" || true)
  value=$(grep -o '"value":\[[^]]*\]' <<<"$answer" | sed 's/.*,"\(.*\)"\]/\1/' || true)
  if [[ $value =~ ^[0-9.eE+-]+$ ]]; then break; fi
  ((SECONDS < deadline)) || fail "PromQL query got no number within 60 s: $answer"
  sleep 2
done
echo "PromQL (dashboard hit ratio): $query = $value"

step "done: image build ${build_s} s, image size $((size / 1000000)) MB, total $((SECONDS - t0)) s"
