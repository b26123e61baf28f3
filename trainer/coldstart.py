"""The embedded model's cold start: a short supervised fine-tune on worked solutions.

RL needs a policy that is sometimes right. The tiny Qwen3 starts from random weights, is fine-tuned on
worked arithmetic solutions, and the fine-tune stops as soon as its sampled accuracy on a dev set
(drawn from the training distribution, never from the held-out split) reaches a target, so RL starts
from a policy that is right some of the time, not most of it. The result is keyed by a hash of
everything that shapes it, built once per machine and cached (GSPO_CACHE or ~/.cache/gspo).

The cache is never trusted blindly. A build writes into a temporary folder `.build-<key>-*`, seals it with
complete.json (the size and sha256 of every file, written last, as a checkpoint's) and renames it into
place, so a kill or a full disk leaves no half-cache under the key. Every use checks the files against
complete.json; a damaged cache (zeroed bytes, a truncated file, no complete.json) is said in one line and
rebuilt. Builders of one key take a file lock (`<key>.lock`): a second process waits for the first and uses
its result, and the lock holder clears the `.build-<key>-*` folders that killed builders left.

The default starts are shipped. A fine-tune of random weights is deterministic on one machine but not across
CPUs (matmul kernels sum in a different order, the stopping rule then lands at another step): built on two
machines, "the embedded model" was two models (step-0 held-out accuracy 0.22-0.25 on one, 0.40-0.42 on the
other). So the starts of the embedded defaults (dense and tiny MoE) ship with the package under
trainer/model/starts/<key>/, sealed like the cache, and every machine loads the same weights; only a spec
that differs from every shipped one (any `model.tiny.*` or task override) is built into the cache, and that
build says it depends on this machine. `gspo coldstart` rebuilds a shipped start and says how far the
rebuild lands from it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from gspo.conf.errors import GspoError, disk_error
from gspo.conf.schema import TinyModelConfig
from gspo.evals.arith import ALPHABET, ArithProblem, grade_arith, make_split
from gspo.trainer.engines.hf_engine import HFEngine
from gspo.trainer.model.models import build_char_tokenizer, build_tiny_qwen3, cache_root, load_pretrained
from gspo.trainer.run.progress import Progress
from gspo.trainer.run.rundir import MANIFEST, checkpoint_problem, seal_folder

FORMAT_VERSION = 1  # bump when the task text, tokenizer or recipe changes meaning
SHIPPED = Path(__file__).parent / "model" / "starts"  # the shipped starts: <key>/ each, sealed (package data)
# the keys gspo ships a start for (model=tiny's and model=tiny-moe's defaults): one absent from SHIPPED is an install
# that lost its package data, not settings of the user's (tests/trainer/test_coldstart_shipped.py holds the list)
SHIPPED_KEYS = ("2e393a9b001295b0", "c0807a2f345c8e0e")


@dataclass(frozen=True)
class ColdStartSpec:
    """Everything that shapes a cold start: the embedded model's settings (`model.tiny`, the schema's
    TinyModelConfig, all but where it is cached) and the arithmetic task it learns."""

    tiny: TinyModelConfig
    min_digits: int
    max_digits: int
    ops: str
    max_new_tokens: int

    def fields(self) -> dict:
        """The settings as one flat dict (the cache key's, and coldstart.json's `spec`)."""
        tiny = {k: v for k, v in asdict(self.tiny).items() if k != "cache_dir"}
        return {**tiny, "min_digits": self.min_digits, "max_digits": self.max_digits, "ops": self.ops,
                "max_new_tokens": self.max_new_tokens}

    def key(self) -> str:
        fields = self.fields()
        if not self.tiny.num_experts:  # a dense model's key is what it was before MoE fields existed
            for name in ("num_experts", "experts_per_token", "moe_intermediate_size"):
                fields.pop(name)
        blob = json.dumps({"v": FORMAT_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cold_start_path(spec: ColdStartSpec, cache_dir: str | None,
                    log: Callable[[str], None] = print, *, progress: bool = False) -> Path:
    """The folder of the cold-started model for `spec`, verified against its complete.json; built first
    (under the key's lock) if it is absent or damaged (`progress`: a bar to the step bound)."""
    key = spec.key()
    shipped = SHIPPED / key
    if shipped.is_dir() or key in SHIPPED_KEYS:  # never rebuilt: the same weights on every machine
        problem = cache_problem(shipped)
        if problem == "absent":
            raise GspoError(f"gspo's install lacks the cold start it ships for these settings ({shipped} is missing; "
                            "its package data was not installed): reinstall gspo (pip install --force-reinstall "
                            "<gspo>), or `gspo coldstart` builds one for this machine")
        if problem is not None:
            raise GspoError(f"the cold start shipped with gspo ({shipped}) is damaged ({problem}): reinstall gspo "
                            "(pip install --force-reinstall <gspo>), or `gspo coldstart` builds one for this machine")
        return shipped
    root = _cache_folder(cache_root(cache_dir) / "coldstart", cache_dir)
    final = root / key
    if cache_problem(final) is None:
        return final
    with _build_lock(root / f"{key}.lock", log):
        problem = cache_problem(final)
        if problem is None:  # another process built it while this one waited
            return final
        if final.exists():
            log(f"note: the cached cold start {final} is damaged ({problem}); rebuilding it")
            _discard(final)
        else:  # else a run whose task setting changed sits in a build unasked
            changed = settings_changed(spec, SHIPPED, "shipped") or settings_changed(spec, root)
            log(f"cold start: none shipped or cached for these settings{f' ({changed})' if changed else ''}: building "
                "one into the cache; a start built here depends on this machine's CPU (the shipped ones do not)")
        for stale in root.glob(f".build-{key}-*"):  # left by a builder killed mid-build (the lock is ours now)
            shutil.rmtree(stale, ignore_errors=True)
        _build_sealed(spec, final, log, progress)
    return final


def _build_sealed(spec: ColdStartSpec, final: Path, log: Callable[[str], None], progress: bool) -> None:
    """Build into a `.build-<key>-*` folder beside `final`, seal it, then rename it into place: a kill or a full
    disk leaves no half-built folder under the key."""
    tmp = Path(tempfile.mkdtemp(prefix=f".build-{spec.key()}-", dir=final.parent))
    try:
        _build(spec, tmp, log, progress, final)
        seal_folder(tmp)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def existing_start(spec: ColdStartSpec, cache_dir: str | None) -> Path | None:
    """The shipped or cached cold start of `spec` when one is there intact, never building one (None)."""
    for folder in (SHIPPED / spec.key(), cache_root(cache_dir) / "coldstart" / spec.key()):
        if folder.is_dir() and cache_problem(folder) is None:
            return folder
    return None


def start_record(folder: Path) -> dict:
    """Which start a run used, for run.json and the report: `shipped` or `built` (in this machine's cache),
    the spec's key, the sha256 of its weights (from its sealed complete.json) and where it was built."""
    info = json.loads((folder / "coldstart.json").read_text())
    files = json.loads((folder / MANIFEST).read_text())["files"]
    weights = next(v["sha256"] for k, v in sorted(files.items()) if k.endswith(".safetensors"))
    return {"source": "shipped" if folder.parent == SHIPPED else "built", "key": folder.name, "weights_sha256": weights,
            "dev_sampled_accuracy": info.get("dev_sampled_accuracy"), "steps": info.get("steps"),
            "built_on": info.get("built_on")}


def rebuild(spec: ColdStartSpec, out: Path, log: Callable[[str], None] = print, *, progress: bool = False) -> Path:
    """Build the start of `spec` afresh into `out`/<key> (never the cache's or the shipped one), sealed."""
    final = out / spec.key()
    if final.exists():
        raise GspoError(f"{final} exists: name another folder (--out) for the rebuild")
    out.mkdir(parents=True, exist_ok=True)
    _build_sealed(spec, final, log, progress)
    return final


def compare_starts(spec: ColdStartSpec, a: Path, b: Path) -> dict:
    """How far start `b` lands from start `a` (both of `spec`): their steps and dev accuracies as built, whether
    the weights are the same bytes, the largest weight difference, and both models' sampled accuracy on one
    dev set with one seed (what a run's step-0 eval would see)."""
    from safetensors.torch import load_file

    info = [json.loads((f / "coldstart.json").read_text()) for f in (a, b)]
    wa, wb = (load_file(next(f.glob("*.safetensors"))) for f in (a, b))
    diff = max(((wa[k] - wb[k]).abs().max().item() for k in wa if k in wb and wa[k].shape == wb[k].shape),
               default=float("inf"))
    split = {"min_digits": spec.min_digits, "max_digits": spec.max_digits, "ops": spec.ops, "seed": spec.tiny.sft_seed}
    dev = make_split("dev", 128, **split)
    accuracy = [_accuracy(_engine(f, spec, len(dev)), dev, seed=spec.tiny.sft_seed) for f in (a, b)]
    return {"steps": [i.get("steps") for i in info], "dev_sampled_accuracy": [i.get("dev_sampled_accuracy") for i in info],
            "same_bytes": start_record(a)["weights_sha256"] == start_record(b)["weights_sha256"],
            "max_abs_weight_diff": diff, "sampled_accuracy_same_seed": accuracy,
            "built_on": [i.get("built_on") for i in info]}


def _engine(folder: Path, spec: ColdStartSpec, rows: int) -> HFEngine:
    model, tokenizer = load_pretrained(str(folder))
    return HFEngine(model, tokenizer, temperature=1.0, top_p=1.0, max_new_tokens=spec.max_new_tokens, batch_size=rows)


SPEC_KEYS = {"min_digits": "task.min_digits", "max_digits": "task.max_digits", "ops": "task.ops",
             "max_new_tokens": "rollout.max_new_tokens"}  # the rest of a spec's fields are model.tiny.<field>


def settings_changed(spec: ColdStartSpec, root: Path, where: str = "cached") -> str:
    """What differs between `spec` and the closest cold start under `root`, as config keys
    (`task.max_digits=4, cached 5`; `where` names the place); empty when there is none there."""
    cached = []
    for f in root.glob("*/coldstart.json"):
        try:
            cached.append(json.loads(f.read_text()).get("spec") or {})
        except (OSError, ValueError):
            continue
    mine = spec.fields()
    diffs = [[k for k in mine if k in c and c[k] != mine[k]] for c in cached]
    if not diffs:
        return ""
    i = min(range(len(diffs)), key=lambda j: len(diffs[j]))
    return ", ".join(f"{SPEC_KEYS.get(k, f'model.tiny.{k}')}={mine[k]}, {where} {cached[i][k]}" for k in diffs[i][:3]) + (
        f" and {len(diffs[i]) - 3} more" if len(diffs[i]) > 3 else "")


def cache_problem(folder: Path) -> str | None:
    """Why the cached cold start in `folder` cannot be used ("absent" when there is none), or None."""
    if not folder.is_dir():
        return "absent"
    if not (folder / MANIFEST).is_file() and (folder / "coldstart.json").is_file():
        return f"no {MANIFEST}: written by an older gspo, without checksums"
    return checkpoint_problem(folder)


def _cache_folder(root: Path, cache_dir: str | None) -> Path:
    """The cache's coldstart/ folder, made if needed; a cache path that is a file or a symlink loop is one line."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(root))
    except OSError as e:
        if disk_error(e) is not None:
            raise
        said = f"model.tiny.cache_dir={cache_dir}" if cache_dir else f"GSPO_CACHE={os.environ.get('GSPO_CACHE')}" \
            if os.environ.get("GSPO_CACHE") else "the cache ~/.cache/gspo"
        raise GspoError(f"{said}: cannot make the cache folder {root} ({e.strerror or e}); point it at a folder "
                        "(GSPO_CACHE=<dir> or model.tiny.cache_dir=<dir>)") from None
    return root


@contextmanager
def _build_lock(path: Path, log: Callable[[str], None]) -> Iterator[None]:
    """The lock of one key's builders: held for the build, released when the process ends however it ends."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"cold start: another process is building {path.with_suffix('')}; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _discard(folder: Path) -> None:
    """Move a damaged cache out of its key's place at once (one rename), then delete it."""
    aside = Path(tempfile.mkdtemp(prefix=f".damaged-{folder.name}-", dir=folder.parent))
    os.replace(folder, aside / folder.name)
    shutil.rmtree(aside, ignore_errors=True)


def _save(model, tokenizer, out: Path) -> None:
    """The weights and tokenizer into `out`; a writer's error on a full disk becomes the OSError it is."""
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    except Exception as e:
        if isinstance(e, OSError) or shutil.disk_usage(out).free >= _FULL_BYTES:
            raise
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out)) from e


_FULL_BYTES = 1 << 20  # less free space than this after a failed write: the disk is full


def _build(spec: ColdStartSpec, out: Path, log: Callable[[str], None], progress: bool, final: Path) -> None:
    tokenizer = build_char_tokenizer(ALPHABET)
    model = build_tiny_qwen3(len(tokenizer), hidden_size=spec.tiny.hidden_size, num_layers=spec.tiny.num_layers,
                             intermediate_size=spec.tiny.intermediate_size, num_heads=spec.tiny.num_heads,
                             num_kv_heads=spec.tiny.num_kv_heads, seed=spec.tiny.sft_seed, num_experts=spec.tiny.num_experts,
                             experts_per_token=spec.tiny.experts_per_token,
                             moe_intermediate_size=spec.tiny.moe_intermediate_size)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"cold start: building the embedded model ({n_params / 1e6:.2f}M parameters) into {final}; it stops when "
        f"the dev sampled accuracy reaches "
        f"{spec.tiny.sft_target_accuracy:.2f} (checked every {spec.tiny.sft_eval_every} steps) or at step {spec.tiny.sft_max_steps}")
    split = {"min_digits": spec.min_digits, "max_digits": spec.max_digits, "ops": spec.ops, "seed": spec.tiny.sft_seed}
    data = make_split("sft", spec.tiny.sft_batch_size * spec.tiny.sft_max_steps, **split)
    dev = make_split("dev", 128, **split)
    engine = HFEngine(model, tokenizer, temperature=1.0, top_p=1.0, max_new_tokens=spec.max_new_tokens,
                      batch_size=len(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.tiny.sft_lr, weight_decay=0.0)
    t0, accuracy, step, recent = time.time(), 0.0, 0, []
    bar = Progress(spec.tiny.sft_max_steps, enabled=progress, label="cold start", stats=_sft_stats)
    with torch.random.fork_rng(), bar:
        say = bar.wrap(log)
        torch.manual_seed(spec.tiny.sft_seed)
        model.train()
        for step in range(1, spec.tiny.sft_max_steps + 1):
            batch = data[(step - 1) * spec.tiny.sft_batch_size : step * spec.tiny.sft_batch_size]
            loss = _sft_loss(model, tokenizer, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            recent = [*recent[1 - spec.tiny.sft_eval_every :], loss.item()]
            mean_loss = sum(recent) / len(recent)
            # above this loss the sampled accuracy is ~0: sampling the dev set would only cost time
            if step % spec.tiny.sft_eval_every == 0 and mean_loss < spec.tiny.sft_eval_max_loss:
                accuracy = _accuracy(engine, dev, seed=spec.tiny.sft_seed + step)
            bar.advance({"loss": mean_loss, "accuracy": accuracy})  # the bar shows this step's check
            if step % spec.tiny.sft_eval_every:
                continue
            say(f"cold start: step {step} loss {mean_loss:.3f} dev sampled accuracy {accuracy:.2f} (stops at "
                f"{spec.tiny.sft_target_accuracy:.2f}; sampled once the loss is below {spec.tiny.sft_eval_max_loss})")
            if accuracy >= spec.tiny.sft_target_accuracy:
                break
    _save(model, tokenizer, out)
    info = {"steps": step, "dev_sampled_accuracy": accuracy, "seconds": round(time.time() - t0, 1),
            "parameters": n_params, "spec": spec.fields(), "format_version": FORMAT_VERSION, "built_on": _machine()}
    (out / "coldstart.json").write_text(json.dumps(info, indent=2))
    log(f"cold start: done in {info['seconds']} s after {step} steps (dev sampled accuracy {accuracy:.2f})")


def _sft_stats(row: dict) -> str:
    return f"loss {row.get('loss', float('nan')):.3f}  dev sampled accuracy {row.get('accuracy', 0.0):.2f}"


def _sft_loss(model, tokenizer, batch: list[ArithProblem]) -> torch.Tensor:
    """Cross-entropy on the response tokens (and the end-of-sequence token), not on the prompt."""
    rows, labels = [], []
    for p in batch:
        prompt = tokenizer(p.prompt, add_special_tokens=False).input_ids
        answer = tokenizer(p.solution, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])  # [B, L] right-padded
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    lengths = torch.tensor([len(r) for r in rows])
    attention_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return model(input_ids=ids, attention_mask=attention_mask, labels=lab).loss


def _accuracy(engine: HFEngine, problems: list[ArithProblem], *, seed: int) -> float:
    out = engine.generate([p.prompt for p in problems], seed=seed)
    return sum(grade_arith(t, p.gold) for t, p in zip(out.texts, problems, strict=True)) / len(problems)


def _machine() -> dict:
    """Where a start was built: what its weights depend on besides its spec."""
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "machine": platform.machine(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
