#!/usr/bin/env bash
# Checks truthscale's NVML source on a real GPU (not run in CI). Needs an NVIDIA GPU, its
# driver, python3 with PyTorch (CUDA), and either a Rust toolchain or TRUTHSCALE=<binary>.
#
# While `truthscale serve --source nvml --interval 1s` runs, it drives one GPU for about
# DURATION seconds with each of:
#   one-sm     a 1-block spin kernel (torch.cuda._sleep)    expect: stalled, SM active <= 2/SMs, ECF ~ 0, spatial >= 50x
#   gemm       a large BF16 GEMM in a loop                   expect: compute_bound, high ECF
#   copy       device-to-device copies of 2 GiB              expect: memory_bound, DRAM high, tensor ~ 0
#   half-grid  a spin kernel on half of the SMs (Triton)     expect: SM active ~ 0.5
# The regime is truthscale_gpu_regime's (the phase, prefill or decode, is only for LLM
# serving); spatial inflation is u / max(s, 0.01), so a busy flag of 0.99 gives at most 99x.
# scrapes /metrics every 2 s after a warm-up, and prints truthscale's medians next to the
# expectations (also written, with every scrape, under OUT). Exits 1 when an expectation
# fails. About 4 x (DURATION + 5) s plus the build: under 5 minutes with the defaults.
#
# Environment:
#   GPU=0             NVML index of the GPU to drive (CUDA is given the same GPU, in PCI order)
#   DURATION=20       seconds per workload
#   PORT=19488        where truthscale serves
#   TRUTHSCALE=...    a truthscale binary (default: cargo build -p truthscale-exporter)
#   NVML_LIBRARY=...  passed as --nvml-library (default: libnvidia-ml.so.1)
#   PYTHON=python3    the Python with PyTorch
#   SMS=132           the GPU's SMs, for the one-SM check (132: H100 SXM, H200)
#   OUT=gpu-check-<time>   output directory
#   GPU_CHECK_DRY_RUN=1    run no workload (sleep instead): a self-test of this script, e.g.
#                          against the fake library (NVML_LIBRARY=target/debug/libfake_nvml.so
#                          FAKE_NVML_SCENARIO=tests/fake-nvml/scenarios/h100-one-sm.json)
set -euo pipefail
cd "$(dirname "$0")/.."

GPU="${GPU:-0}"
DURATION="${DURATION:-20}"
PORT="${PORT:-19488}"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-gpu-check-$(date +%Y%m%d-%H%M%S)}"
DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
mkdir -p "$OUT"

if [ "$DRY_RUN" != 1 ]; then
  if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: $PYTHON has no PyTorch with CUDA (pip install torch), or no GPU is visible" >&2
    exit 2
  fi
fi

if [ -z "${TRUTHSCALE:-}" ]; then
  echo "gpu-check: building truthscale (cargo build -p truthscale-exporter)" >&2
  cargo build --quiet -p truthscale-exporter --bin truthscale
  TRUTHSCALE="${CARGO_TARGET_DIR:-target}/debug/truthscale"
fi

serve_args=(serve --source nvml --interval 1s --listen "127.0.0.1:$PORT")
if [ -n "${NVML_LIBRARY:-}" ]; then
  serve_args+=(--nvml-library "$NVML_LIBRARY")
fi
"$TRUTHSCALE" "${serve_args[@]}" >"$OUT/truthscale.stdout" 2>"$OUT/truthscale.stderr" &
SERVE_PID=$!
cleanup() {
  kill "$SERVE_PID" 2>/dev/null || true
  wait "$SERVE_PID" 2>/dev/null || true
}
trap cleanup EXIT

export GPU DURATION PORT OUT DRY_RUN SERVE_PID
"$PYTHON" - <<'PY'
import json, os, statistics, subprocess, sys, time, urllib.request

GPU = os.environ["GPU"]
DURATION = float(os.environ["DURATION"])
PORT = os.environ["PORT"]
OUT = os.environ["OUT"]
DRY_RUN = os.environ["DRY_RUN"] == "1"
SERVE_PID = int(os.environ["SERVE_PID"])
WARMUP = 5.0

# The workloads, run in a child Python so that a crash in one does not end the check.
WORK = r'''
import sys, time, torch
mode, duration = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda:0")
props = torch.cuda.get_device_properties(dev)
end = time.time() + duration
if mode == "one-sm":
    # torch.cuda._sleep launches a spin kernel of one block with one thread.
    while time.time() < end:
        torch.cuda._sleep(50_000_000)
        torch.cuda.synchronize()
elif mode == "gemm":
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    while time.time() < end:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
elif mode == "copy":
    n = (2 << 30) // 4
    src = torch.empty(n, device=dev, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    while time.time() < end:
        for _ in range(10):
            dst.copy_(src)
        torch.cuda.synchronize()
elif mode == "half-grid":
    import triton
    import triton.language as tl

    @triton.jit
    def spin(out_ptr, iters):
        # One program per SM for half of the SMs; each spins on dependent FMAs.
        pid = tl.program_id(0)
        acc = pid.to(tl.float32)
        for _ in range(iters):
            acc = acc * 0.999999 + 0.5
        tl.store(out_ptr + pid, acc)

    blocks = max(1, props.multi_processor_count // 2)
    out = torch.empty(blocks, device=dev, dtype=torch.float32)
    while time.time() < end:
        spin[(blocks,)](out, 20_000_000, num_warps=4)
        torch.cuda.synchronize()
else:
    sys.exit(f"unknown mode {mode}")
'''

WORK_FILE = os.path.join(OUT, "workload.py")
with open(WORK_FILE, "w") as f:
    f.write(WORK)
# The SMs of the GPU under test, for the one-SM check (132 on an H100 SXM and an H200).
SMS = int(os.environ.get("SMS", "132"))

EXPECT = {
    "one-sm": "stalled, SM active <= 2/SMs, ECF ~ 0, spatial >= 50x",
    "gemm": "compute_bound, high ECF",
    "copy": "memory_bound: DRAM high, tensor ~ 0",
    "half-grid": "SM active ~ 0.5",
}


def scrape():
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=5) as r:
        return r.read().decode()


def parse(text):
    """(name, labels, value) of every sample of the GPU under test."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, labels = head, {}
        if "{" in head:
            name, _, rest = head.partition("{")
            for part in rest.rstrip("}").split('",'):
                if "=" in part:
                    k, _, v = part.partition("=")
                    labels[k.strip(",")] = v.strip('"')
        try:
            out.append((name, labels, float(value)))
        except ValueError:
            pass
    return out


def gpu_value(samples, name, **want):
    for n, labels, v in samples:
        if n == name and labels.get("gpu") == GPU and "mig_instance" not in labels and all(
            labels.get(k) == x for k, x in want.items()
        ):
            return v
    return None


def wait_ready():
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(SERVE_PID, 0)
        except OSError:
            sys.exit("gpu-check: truthscale exited; see " + OUT + "/truthscale.stderr")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("gpu-check: truthscale not ready in 30 s; see " + OUT + "/truthscale.stderr")


FIELDS = {
    "busy": "truthscale_gpu_reported_utilization_ratio",
    "sm": "truthscale_gpu_sm_active_ratio",
    "tensor": "truthscale_gpu_tensor_active_ratio",
    "dram": "truthscale_gpu_dram_active_ratio",
    "ecf": "truthscale_gpu_effective_compute_ratio",
    "spatial": "truthscale_gpu_spatial_inflation_factor",
    "rho": "truthscale_gpu_intensity_ridge_ratio",
    "power": "truthscale_gpu_power_watts",
}


def run(mode):
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=GPU)
    if DRY_RUN:
        child = subprocess.Popen(["sleep", str(DURATION)])
    else:
        # From a file: Triton reads a kernel's source from the file that defines it.
        child = subprocess.Popen([sys.executable, WORK_FILE, mode, str(DURATION)], env=env)
    start = time.time()
    rows, phases, fidelity = [], [], set()
    with open(os.path.join(OUT, f"{mode}.scrapes.txt"), "w") as raw:
        while time.time() - start < DURATION - 1 and child.poll() is None:
            time.sleep(2)
            if time.time() - start < WARMUP:
                continue
            text = scrape()
            raw.write(f"# t={time.time() - start:.1f}s\n{text}\n")
            s = parse(text)
            rows.append({k: gpu_value(s, n) for k, n in FIELDS.items()})
            for n, labels, v in s:
                if n == "truthscale_gpu_regime" and labels.get("gpu") == GPU and v == 1:
                    phases.append(labels.get("regime"))
                if n == "truthscale_gpu_info" and labels.get("gpu") == GPU:
                    fidelity.add(labels.get("fidelity"))
    code = child.wait()
    if code != 0:
        print(f"gpu-check: workload {mode} exited with {code}", file=sys.stderr)

    def med(k):
        vals = [r[k] for r in rows if r.get(k) is not None]
        return statistics.median(vals) if vals else None

    result = {k: med(k) for k in FIELDS}
    result["phase"] = max(set(phases), key=phases.count) if phases else None
    result["fidelity"] = ",".join(sorted(f for f in fidelity if f)) or None
    result["scrapes"] = len(rows)
    result["workload_exit"] = code
    return result


def check(mode, r):
    g = lambda k: r.get(k)
    lt = lambda k, x: g(k) is not None and g(k) < x
    ge = lambda k, x: g(k) is not None and g(k) >= x
    if mode == "one-sm":
        return (
            r["phase"] == "stalled"
            and lt("sm", 2 / SMS + 1e-9)
            and lt("ecf", 0.01)
            and ge("spatial", 50)
        )
    if mode == "gemm":
        return r["phase"] == "compute_bound" and ge("ecf", 0.3)
    if mode == "copy":
        return ge("dram", 0.5) and lt("tensor", 0.05) and r["phase"] == "memory_bound"
    if mode == "half-grid":
        return g("sm") is not None and 0.35 <= g("sm") <= 0.65
    return False


def fmt(v, pct=True):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v * 100:.1f} %" if pct else f"{v:.2f}"


wait_ready()
results = {}
for mode in ["one-sm", "gemm", "copy", "half-grid"]:
    print(f"gpu-check: {mode} for {DURATION:.0f} s …", file=sys.stderr, flush=True)
    results[mode] = run(mode)
    time.sleep(2)

lines = [
    f"GPU {GPU}, {DURATION:.0f} s per workload, truthscale serve --source nvml --interval 1s"
    + (" (DRY RUN: no workload ran)" if DRY_RUN else ""),
    "",
    "| workload | expected | regime | fidelity | busy | SM active | tensor | DRAM | ECF | spatial | rho | power W | check |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]
failed = []
for mode, r in results.items():
    ok = check(mode, r)
    if not ok:
        failed.append(mode)
    lines.append(
        f"| {mode} | {EXPECT[mode]} | {fmt(r['phase'])} | {fmt(r['fidelity'])} | {fmt(r['busy'])} "
        f"| {fmt(r['sm'])} | {fmt(r['tensor'])} | {fmt(r['dram'])} | {fmt(r['ecf'])} "
        f"| {fmt(r['spatial'], False)} | {fmt(r['rho'], False)} | {fmt(r['power'], False)} "
        f"| {'PASS' if ok else 'FAIL'} |"
    )
table = "\n".join(lines) + "\n"
print(table)
with open(os.path.join(OUT, "results.md"), "w") as f:
    f.write(table)
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
if failed:
    print("gpu-check: not as expected: " + ", ".join(failed) + f" (details in {OUT}/)", file=sys.stderr)
    sys.exit(1)
PY
