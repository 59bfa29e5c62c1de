"""Training throughput and peak memory of `mlxgo lora` against `mlx_lm.lora` (bench/lora.sh runs it).

Every engine trains the same LoRA adapters on the same checkpoint, data and flags, with and without
--grad-checkpoint, in its own process, the engines alternating their order from one repetition to
the next:

  mlxgo-cpu  mlxgo lora --backend cpu   (the pure-Go backend; its peak is the arrays it holds)
  mlxgo-mlx  mlxgo lora --backend mlx   (MLX's default device: its CPU here, CUDA on a GPU host)
  mlxgo-mlx-nocompile  the same with --no-compile (each training step op by op, not compiled)
  mlx_lm     bench/mlx_lm_lora_driver.py, which is mlx_lm.lora's main() printing its reports

Each run reports every --report steps; the last report (steps after the first --report, so MLX's
compilation and the first step's allocations are out of it) gives the training tokens/s and the
peak memory the engine reports (MLX's mx.get_peak_memory for mlx_lm and the mlx backend, the CPU
backend's array peak), and the child's peak RSS comes from wait4. Validation (one batch, at the
first and last step) is outside the timed steps, as in mlx_lm. The result is a JSON file and a
markdown table in --results (bench/results), named by the UTC time and --label.
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

MLXGO_RE = re.compile(r"Iter (\d+): Train loss ([\d.eE+-]+|nan), Learning Rate [\d.eE+-]+, It/sec ([\d.eE+-]+), "
                      r"Tokens/sec ([\d.eE+-]+), Trained Tokens (\d+), Peak mem ([\d.eE+-]+) GB")


def parse(engine, out):
    """Returns the training reports of a run's stdout as dicts."""
    reports = []
    for line in out.splitlines():
        if engine == "mlx_lm":
            if line.startswith("BENCH-TRAIN "):
                r = json.loads(line[len("BENCH-TRAIN "):])
                reports.append({"iteration": r["iteration"], "train_loss": r["train_loss"],
                                "it_per_sec": r["iterations_per_second"], "tokens_per_sec": r["tokens_per_second"],
                                "trained_tokens": r["trained_tokens"], "peak_memory_gb": r["peak_memory"]})
        else:
            m = MLXGO_RE.search(line)
            if m:
                reports.append({"iteration": int(m[1]), "train_loss": float(m[2]), "it_per_sec": float(m[3]),
                                "tokens_per_sec": float(m[4]), "trained_tokens": int(m[5]), "peak_memory_gb": float(m[6])})
    return reports


def run_child(cmd, env, log):
    """Runs cmd, returning (exit code, stdout, peak RSS in MB, seconds)."""
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, env=env, text=True)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        f.write("\n--- stdout ---\n" + out)
    return p.returncode, out, ru.ru_maxrss / 1024, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mlxgo", required=True, help="mlxgo binary built with -tags mlx")
    ap.add_argument("--python", default=sys.executable, help="Python with mlx and mlx_lm")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--engines", default="mlxgo-cpu,mlxgo-mlx,mlx_lm")
    ap.add_argument("--checkpoint", default="off,on", help="--grad-checkpoint settings to run: off, on or both")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--report", type=int, default=3, help="steps per report; the last report is kept")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--num-layers", type=int, default=8)
    ap.add_argument("--learning-rate", default="1e-4")
    ap.add_argument("--max-seq-length", type=int, default=2048)
    ap.add_argument("--mask-prompt", action="store_true")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--label", default="vm")
    ap.add_argument("--results", default="bench/results")
    ap.add_argument("--workdir", default="/tmp/mlxgo-lora-bench")
    a = ap.parse_args()
    if a.iters < 2 * a.report:
        ap.error("--iters must be at least twice --report (the last report is the steady state)")
    engines = a.engines.split(",")
    for e in engines:
        if e not in ("mlxgo-cpu", "mlxgo-mlx", "mlxgo-mlx-nocompile", "mlx_lm"):
            ap.error(f"--engines: unknown engine {e!r} (mlxgo-cpu, mlxgo-mlx, mlxgo-mlx-nocompile, mlx_lm)")
    cks = [{"off": False, "on": True}[c] for c in a.checkpoint.split(",")]
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    flags = ["--model", a.model, "--train", "--data", a.data, "--iters", str(a.iters), "--batch-size", str(a.batch_size),
             "--num-layers", str(a.num_layers), "--learning-rate", a.learning_rate, "--steps-per-report", str(a.report),
             "--steps-per-eval", str(10 * a.iters), "--val-batches", "1", "--max-seq-length", str(a.max_seq_length),
             "--seed", "0"] + (["--mask-prompt"] if a.mask_prompt else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    runs = []
    for rep in range(a.reps):
        order = engines if rep % 2 == 0 else engines[::-1]
        for ck in cks:
            for e in order:
                tag = f"{e}-ck{int(ck)}-r{rep}"
                out_dir = os.path.join(a.workdir, tag)
                if e == "mlx_lm":
                    cmd = [a.python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlx_lm_lora_driver.py")]
                else:
                    cmd = [a.mlxgo, "lora", "--backend", e.split("-")[1]] + (["--no-compile"] if e.endswith("-nocompile") else [])
                cmd += flags + ["--adapter-path", out_dir] + (["--grad-checkpoint"] if ck else [])
                print(f"== {tag}: {' '.join(cmd)}", file=sys.stderr, flush=True)
                code, out, rss, secs = run_child(cmd, env, os.path.join(a.workdir, tag + ".log"))
                reps = parse(e, out)
                r = {"engine": e, "grad_checkpoint": ck, "rep": rep, "exit": code, "wall_s": round(secs, 2),
                     "peak_rss_mb": round(rss, 1), "reports": reps}
                if code == 0 and reps:
                    last = reps[-1]
                    r.update(tokens_per_sec=last["tokens_per_sec"], peak_memory_gb=last["peak_memory_gb"],
                             final_train_loss=last["train_loss"])
                print(f"   exit {code}, {secs:.1f} s, " + (f"{r['tokens_per_sec']:.2f} tok/s, peak {r['peak_memory_gb']:.3f} GB, "
                      f"RSS {rss:.0f} MB" if "tokens_per_sec" in r else "no report (see the log)"), file=sys.stderr, flush=True)
                runs.append(r)
    rows = []
    for ck in cks:
        base = [r["tokens_per_sec"] for r in runs if r["engine"] == "mlx_lm" and r["grad_checkpoint"] == ck and "tokens_per_sec" in r]
        base_mem = [r["peak_memory_gb"] for r in runs if r["engine"] == "mlx_lm" and r["grad_checkpoint"] == ck and "tokens_per_sec" in r]
        for e in engines:
            rs = [r for r in runs if r["engine"] == e and r["grad_checkpoint"] == ck and "tokens_per_sec" in r]
            if not rs:
                rows.append({"engine": e, "grad_checkpoint": ck, "ok": False})
                continue
            tps = statistics.median(r["tokens_per_sec"] for r in rs)
            mem = statistics.median(r["peak_memory_gb"] for r in rs)
            row = {"engine": e, "grad_checkpoint": ck, "ok": True, "runs": len(rs), "tokens_per_sec": tps,
                   "tokens_per_sec_all": [r["tokens_per_sec"] for r in rs], "peak_memory_gb": mem,
                   "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs)}
            if base:
                row["tokens_per_sec_vs_mlx_lm"] = tps / statistics.median(base)
                row["peak_memory_vs_mlx_lm"] = mem / statistics.median(base_mem)
            rows.append(row)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H%M%S")
    doc = {"date": now.isoformat(timespec="seconds"), "label": a.label, "host": platform.node(), "cpus": os.cpu_count(),
           "machine": platform.machine(), "args": vars(a), "flags": flags, "summary": rows, "runs": runs}
    try:
        doc["mlxgo_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    base = os.path.join(a.results, f"{stamp}-{a.label}-lora")
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"LoRA training, {doc['date']} ({a.label}): {a.model}, {a.data}, iters {a.iters}, report every {a.report}, "
             f"batch {a.batch_size}, {a.num_layers} layers; the last report's numbers, median of {a.reps} rep(s)", "",
             "| engine | grad checkpoint | tokens/s | ×mlx_lm | peak memory MB (engine) | ×mlx_lm | peak RSS MB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['engine']} | {'on' if r['grad_checkpoint'] else 'off'} | failed | | | | |")
            continue
        x = f"{r['tokens_per_sec_vs_mlx_lm']:.2f}×" if "tokens_per_sec_vs_mlx_lm" in r else ""
        xm = f"{r['peak_memory_vs_mlx_lm']:.2f}×" if "peak_memory_vs_mlx_lm" in r else ""
        lines.append(f"| {r['engine']} | {'on' if r['grad_checkpoint'] else 'off'} | {r['tokens_per_sec']:.2f} | {x} | "
                     f"{1000 * r['peak_memory_gb']:.1f} | {xm} | {r['peak_rss_mb']:.0f} |")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {base}.json and {base}.md", file=sys.stderr)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
