"""Mutation check: does some test fail when a feature is deliberately broken? Run by hand, not in CI.

    python perf/mutations.py            # every breakage
    python perf/mutations.py nproc kl   # only those whose name contains one of the words
    python perf/mutations.py --all bwrap  # without -x: every test that fails, not only the first

Each breakage is a literal text replacement in one or more source files (it must match exactly once,
so a stale entry fails loudly instead of silently testing nothing). The files are changed in place,
because the project is installed editable and the sandbox ships its runner as source, so a copy of the
tree would not be what the tests import; every file is restored in a `finally`, a backup beside the
script restores any file a killed run left changed, and the script checks at the end that each file
is byte-identical to what it was. For each breakage it runs the named tests with `-x -q` and prints
which test caught it, or that none did.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKUP = ROOT / "perf" / ".mutations-backup.json"  # exists only while a mutant is applied
LOCK = ROOT / "perf" / ".mutations.lock"  # one run at a time: two would restore each other's mutants
TIMEOUT_S = 600


@dataclass(frozen=True)
class Mutant:
    name: str
    why: str
    edits: tuple[tuple[str, str, str], ...]  # (file, old text, new text)
    tests: tuple[str, ...]


SANDBOX = ("tests/evals/test_sandbox.py",)
UPDATE = ("tests/trainer/step/test_update.py",)
FEATURES = ("tests/trainer/test_trainer_features.py",)

MUTANTS = [
    Mutant("algo-hardcoded", "the update always runs GRPO, whatever algo= says",
           (("trainer/step/update.py", "        algo.name, logp=logp,", '        "grpo", logp=logp,'),), UPDATE + FEATURES),
    Mutant("aggregation-ignored", "the update ignores algo.options (GRPO's aggregation)",
           (("trainer/step/update.py", "**algo.options, max_len=ctx.sampling.max_new_tokens,",
             "max_len=ctx.sampling.max_new_tokens,"),), UPDATE),
    Mutant("micro-batch-ignored", "train.micro_batch_size is ignored (whole minibatch in one forward)",
           (("trainer/step/update.py", "micro = micro_batch_size or -(-len(idx) // world.size)",
             "micro = -(-len(idx) // world.size)"),), UPDATE),
    Mutant("micro-batch-unsorted", "a split minibatch's rows are not sorted by length into micro-batches",
           (("trainer/step/update.py", "        idx = sorted(idx, key=lambda i: sizes[i])", "        pass"),), UPDATE),
    Mutant("left-padding-kept", "the update's forwards keep the all-padding columns left of the prompts",
           (("trainer/step/update.py", "left = min(batch.pad_left[i] for i in part) if batch.pad_left else 0",
             "left = 0"),), UPDATE),
    Mutant("micro-batch-local-denominator", "each micro-batch's loss is a mean over itself (peers' bug)",
           (("trainer/step/update.py", "seq_denominator=den[0], token_denominator=den[1],",
             "seq_denominator=float(len(part)), token_denominator=float(batch.rollout.completion_mask[part].sum()),"),), UPDATE),
    Mutant("micro-batch-metric-weights", "micro-batch token metrics weighted by their share of sequences",
           (("trainer/step/reduction.py", "weight = {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq,",
             "weight = {TOKEN_MEAN: n_seq, SEQ_MEAN: n_seq,"),), UPDATE),
    Mutant("epochs-ignored", "train.epochs is ignored in the update",
           (("trainer/step/update.py", "for epoch in range(ctx.train.epochs):", "for epoch in range(1):"),), UPDATE + FEATURES),
    Mutant("kl-term-skipped", "the k3 KL term is never added to the loss",
           (("algos/common.py", "loss = policy_loss + kl_beta * reduce_tokens(kl)", "loss = policy_loss"),), UPDATE),
    Mutant("kl-reference-dropped", "the trainer never builds the reference model",
           (("trainer/loop.py", "    if cfg.algo.kl_beta <= 0:\n        return None", "    return None"),), FEATURES),
    Mutant("adv-scale-ignored", "algo.adv_scale is ignored by the rollout's advantages",
           (("trainer/step/advantages.py", "scale=algo.adv_scale", 'scale="std"'),), FEATURES),
    Mutant("engine-logprobs-ignored", "algo.old_logp_source=engine never replaces the old log-probs",
           (("trainer/step/advantages.py", 'advantages, rollout.engine_logp if old_logp_origin(algo) == ENGINE else old_logp, {}',
             "advantages, old_logp, {}"),),
           FEATURES),
    Mutant("chat-template-ignored", "model.chat_template is ignored for training prompts",
           (("trainer/step/sampling.py", "items, chat=conf.chat, repeat=G", "items, chat=False, repeat=G"),), FEATURES),
    Mutant("warmup-ignored", "no lr warmup", (("trainer/state.py", "return (i + 1) / train.warmup_steps", "return 1.0"),),
           UPDATE + FEATURES),
    Mutant("schedule-ignores-epochs", "the lr schedule's length ignores epochs",
           (("trainer/state.py", "train.steps * train.minibatches * train.epochs", "train.steps * train.minibatches"),),
           UPDATE + FEATURES),
    Mutant("eos-dropped-from-mask", "the completion mask drops the eos token itself",
           (("trainer/engines/rollout.py", "seen_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0",
             "seen_before = is_eos.long().cumsum(-1) > 0"),), ("tests/trainer/engines/test_rollout.py",)),
    Mutant("held-out-swapped", "the training task draws from the held-out bucket",
           (("trainer/tasks/registry.py", "if not is_held_out(p):", "if is_held_out(p):"),), ("tests/evals/test_arith.py",)),
    Mutant("test-split-swapped", "make_split('test') returns training problems",
           (("evals/arith.py", 'want_test = split == "test"', 'want_test = split != "test"'),), ("tests/evals/test_arith.py",)),
    Mutant("eval-bench-other-problems", "gspo eval's arith benchmark draws other problems than the run's held-out set",
           (("evals/benchmarks/arith.py", 'problems = make_split("test", limit or n, seed=0,',
             'problems = make_split("test", limit or n, seed=1,'),),
           ("tests/cli/test_eval_cli.py::test_eval_arith_agrees_with_the_training_eval",)),
    Mutant("grader-ignores-last-mark", "the arithmetic grader reads the first answer, not the last",
           (("evals/arith.py", "return found[-1] if found else None", "return found[0] if found else None"),),
           ("tests/evals/test_arith.py",)),
    Mutant("bwrap-no-net-namespace", "bwrap without --unshare-net",
           (("evals/sandbox/backends.py", '"--unshare-pid", "--unshare-net", ', '"--unshare-pid", '),), SANDBOX),
    Mutant("bwrap-no-pid-namespace", "bwrap without --unshare-pid (nor --as-pid-1, which needs it)",
           (("evals/sandbox/backends.py", '"--unshare-user", "--unshare-pid", ', '"--unshare-user", '),
            ("evals/sandbox/backends.py", '"--die-with-parent", "--as-pid-1", ', '"--die-with-parent", ')), SANDBOX),
    Mutant("bwrap-writable-root", "bwrap leaves its root file system writable",
           (("evals/sandbox/backends.py", '"--remount-ro", "/", ', ""),), SANDBOX),
    Mutant("no-process-limit", "the runner sets no RLIMIT_NPROC",
           (("evals/sandbox/runner.py", '(resource.RLIMIT_NPROC, (job["nproc"],) * 2), ', ""),), SANDBOX),
    Mutant("no-file-size-limit", "the runner sets no RLIMIT_FSIZE",
           (("evals/sandbox/runner.py", '(resource.RLIMIT_FSIZE, (job["fsize_bytes"],) * 2),', ""),), SANDBOX),
    Mutant("environment-inherited", "the sandbox inherits the grader's environment",
           (("evals/sandbox/backends.py", '"--chdir", "/tmp", "--clearenv"]', '"--chdir", "/tmp"]'),
            ("evals/sandbox/process.py", "stderr=self._stderr,\n                                      env=env,",
             "stderr=self._stderr,\n                                      env={**os.environ, **env},")), SANDBOX),
    Mutant("no-uid-drop", "as root, programs keep the grader's uid",
           (("evals/sandbox/choose.py", "return [Backend(n, os.geteuid() == 0) for n in names]",
             "return [Backend(n, False) for n in names]"),),
           SANDBOX),
    Mutant("math-reward-always-zero", "the math task's reward ignores the grader",
           (("trainer/tasks/registry.py", "_score=graded_by(grade_math)", "_score=graded_by(lambda response, gold: False)"),),
           ("tests/trainer/tasks/test_train_hf_math.py",)),
    Mutant("eval-first-bench-only", "gspo eval grades only the first of several benchmarks",
           (("trainer/evaluate.py", "    for bench in benches:", "    for bench in benches[:1]:"),),
           ("tests/trainer/test_eval_features.py",)),
    Mutant("wandb-new-run-on-resume", "a resumed run logs to a new W&B run",
           (("trainer/run/loggers.py", '"id": run.path.name.replace("/", "-"),', '"id": None,'),), ("tests/trainer/run/test_wandb_resume.py",)),
    Mutant("cli-error-traceback", "the console script lets user errors out as tracebacks",
           (("conf/errors.py", "    except GspoError as e:", "    except ZeroDivisionError as e:"),),
           ("tests/cli/test_eval_cli.py::test_eval_bad_input_through_the_console_script",)),
    Mutant("eval-bad-k-not-a-user-error", "eval.k=0 is not refused at compose (a failure deep in the eval instead)",
           (("conf/ranges.py", '"eval.k": _ONE, ', ""),),
           ("tests/cli/test_eval_cli.py::test_eval_bad_input_is_one_line",)),
    Mutant("sigterm-not-handled", "SIGTERM kills the run without marking it interrupted",
           (("trainer/loop.py", "ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)",
             "ENDING_SIGNALS = ()"),), ("tests/trainer/run/test_kill.py::test_sigterm_marks_the_run_interrupted",)),
    Mutant("leftovers-not-killed", "a program that exits normally leaves its daemons running",
           (("evals/sandbox/runner.py",
             "                _rn_kill_all(pid, False)  # daemons and background children may still hold the pipes",
             "                pass"),), SANDBOX),
    Mutant("namespace-kill-dropped", "pid 1 of the namespace no longer kill(-1)s everything after a job",
           (("evals/sandbox/runner.py", "            os.kill(-1, signal.SIGKILL)  # from a namespace's init",
             "            pass  # from a namespace's init"),), SANDBOX),
]

# issue 47: the family anchored where its authors anchor it, one breakage per fix
ANCHORS = ("tests/algos/test_algos_anchors.py", "tests/trainer/step/test_family_anchors.py")
MUTANTS += [
    Mutant("opsm-mask-on-old-logp", "OPSM's mask reads the loss's pi_old, not the sampler's log-probs",
           (("algos/opsm.py", "token_log_ratio(x.rollout_logp(), x.logp.detach(), x.mask)",
             "token_log_ratio(x.old_logp, x.logp.detach(), x.mask)"),), ANCHORS),
    Mutant("update-drops-sampler-logp", "the update hands the loss no sampler log-probs",
           (("trainer/step/update.py", "sampler = r.engine_logp[rows, :width].to(old.dtype) if r.engine_logp is not None "
             "else None", "sampler = None"),), ANCHORS[1:]),
    Mutant("engine-not-asked-for-logprobs", "the engine returns log-probs only where they are the loss's pi_old",
           (("trainer/engines/registry.py", "want = old_logp_origin(cfg.algo) == ENGINE or reads",
             "want = old_logp_origin(cfg.algo) == ENGINE"),), ANCHORS[1:]),
    Mutant("dppo-anchored-at-trainer", "DPPO's trust region anchored at pi_old by default",
           (("algos/dppo.py", 'anchor: str = "sampler"  #', 'anchor: str = "trainer"  #'),), ANCHORS[:1]),
    Mutant("dppo-cap-20", "DPPO's weight capped at 20 (our old number), not the authors' 10000",
           (("algos/dppo.py", "tis_cap: float = 10000.0", "tis_cap: float = 20.0"),), ANCHORS[:1]),
    Mutant("dppo-clipfrac-skips-zero-advantage", "DPPO's clip fraction leaves out dropped tokens with A = 0",
           (("algos/dppo.py", "low=dropped & ~up,", "low=dropped & ~up & (adv != 0),"),), ANCHORS[:1]),
    Mutant("dppo-correction-twice", "DPPO anchored at the sampler takes a correction on top (the mismatch twice)",
           (("trainer/step/advantages.py", 'if c.kind != Correction.NONE and getattr(options, "anchored_at_sampler", False):',
             "if False:"),), ANCHORS[1:]),
    Mutant("mis-band-not-icepop", "MIS at token level keeps verl's [0.5, 2], not IcePop's [0.5, 5]",
           (("trainer/step/advantages.py", "        low, high = ICEPOP_BAND", "        pass"),),
           ("tests/trainer/step/test_corrections.py::test_the_level_follows_the_algorithms_ratio_and_each_level_has_its_bounds",)),
    Mutant("opsm-refuses-token-level", "OPSM takes no per-token advantages (a token-level correction refused)",
           (("algos/opsm.py", "token_advantages=True, reads_sampler=True", "token_advantages=False, reads_sampler=True"),),
           ANCHORS[1:]),
    Mutant("gdpo-filter-on-correctness", "dynamic sampling under GDPO drops groups that vary only in format",
           (("trainer/step/sampling.py", "if not get_estimator(conf.algo.advantage).needs_components:", "if True:"),),
           ANCHORS[1:]),
    Mutant("gdpo-refill-not-zero", "a group constant in every component keeps GDPO's rounding of the batch mean",
           (("algos/advantages.py", "(total.amax() == total.amin()) | silent", "(total.amax() == total.amin())"),),
           ANCHORS),
    Mutant("card-phantom-filter", "the card names a filter where dynamic sampling is off",
           (("trainer/step/explain.py", '+ (" (added after the filter below)" if r.dynamic_sampling else "")',
             '+ " (added after the filter below)"'),), ANCHORS[1:]),
    Mutant("report-silent-mechanism-unsaid", "the page gives no note for an arm whose mechanism never acted",
           (("report/write.py", "verdict = common + never_acted(arms) + _verdict(", "verdict = common + _verdict("),),
           ("tests/report/test_never_acted.py",)),
    Mutant("decode-window-off", "the static decoder attends over its whole bucket again (issue 61)",
           (("trainer/engines/static_decode.py", "self.window = window if windowed else None", "self.window = None"),),
           ("tests/trainer/engines/test_decode_reads.py",)),
    Mutant("decode-compaction-off", "ended rows stay in the static decoder's batch",
           (("trainer/engines/static_decode.py", "        if size >= self.rows:\n", "        if True:\n"),),
           ("tests/trainer/engines/test_decode_reads.py",)),
    Mutant("decode-seeds-stay", "compaction moves the rows but not their seeds: a row draws another row's uniforms",
           (("trainer/engines/static_decode.py", "self.done, self.row, self.seeds):", "self.done, self.row):"),),
           ("tests/trainer/engines/test_decode_reads.py",)),
]


# issue 62: the thin nets made thick (each caught by more than one hand-computed test: run with --all), and the new
# members and options, one breakage each
KL_TESTS = ("tests/algos/test_algos_family_2026.py", "tests/algos/test_algos_anchors.py",
            "tests/algos/test_algos_family_2026b.py")
TOKEN_TESTS = ("tests/algos/test_algos_gspo.py", "tests/algos/test_algos_invariants.py",
               "tests/algos/test_algos_family_2026b.py")
NEW_TESTS = ("tests/algos/test_algos_family_2026b.py",)
MUTANTS += [
    Mutant("binary-kl-safe-side-flipped-pos", "DPPO Binary-KL keeps a positive-advantage token moving up, not down",
           (("algos/dppo.py", "(kl <= x.clip_high) | (p <= q)", "(kl <= x.clip_high) | (p >= q)"),), KL_TESTS),
    Mutant("binary-kl-safe-side-flipped-neg", "DPPO Binary-KL keeps a negative-advantage token moving down, not up",
           (("algos/dppo.py", "(kl <= x.clip_low) | (p >= q)", "(kl <= x.clip_low) | (p <= q)"),), KL_TESTS),
    Mutant("gspo-token-no-stop-gradient", "GSPO-token's s_i carries a gradient (sg[s_i] lost)",
           (("algos/gspo_token.py", "seq_log_ratio(log_ratio, x.mask).detach()", "seq_log_ratio(log_ratio, x.mask)"),),
           TOKEN_TESTS),
    Mutant("gspo-token-no-token-path", "GSPO-token's pi_it / sg[pi_it] lost: no token gradient path",
           (("algos/gspo_token.py", "token_log_ratio(x.logp, x.logp.detach(), x.mask)",
             "token_log_ratio(x.logp.detach(), x.logp.detach(), x.mask)"),), TOKEN_TESTS),
    Mutant("cispo-anchor-ignored", "CISPO's anchor=sampler still weighs pi / pi_old",
           (("algos/cispo.py", "token_log_ratio(x.logp, x.anchor_logp(anchor), x.mask)",
             "token_log_ratio(x.logp, x.old_logp, x.mask)"),), NEW_TESTS),
    Mutant("k3-rs-no-veto", "the trust-region sequence mask ignores its token veto",
           (("algos/corrections.py", "kept = (divergence <= cap) & ~vetoed", "kept = divergence <= cap"),), NEW_TESTS),
    Mutant("k3-rs-sum-not-mean", "the trust-region sequence mask sums k3 over the tokens instead of averaging",
           (("algos/corrections.py", "divergence = masked_sum(k3(d), mask, dim=-1) / mask.sum(dim=-1).clamp(min=1.0)",
             "divergence = masked_sum(k3(d), mask, dim=-1)"),), NEW_TESTS),
    Mutant("geo-rs-tis-no-cap", "Geo-RS-Seq-TIS masks but does not truncate the product",
           (("algos/corrections.py", "torch.where(kept, rho.clamp(max=cap), torch.zeros_like(rho))",
             "torch.where(kept, rho, torch.zeros_like(rho))"),), NEW_TESTS),
    Mutant("luspo-no-length", "LUSPO without its length weight (GSPO's loss)",
           (("algos/luspo.py", "seq_mean(seq_lengths(x.mask) * objective,", "seq_mean(objective,"),), NEW_TESTS),
    Mutant("vespo-signs-swapped", "VESPO's (k, lambda) pairs swapped between the advantage's signs",
           (("algos/vespo.py", "    nonneg = adv >= 0\n", "    nonneg = adv < 0\n"),), NEW_TESTS),
    Mutant("vespo-geometric-mean", "VESPO's w is the geometric mean of the token ratios, not their product",
           (("algos/vespo.py", "log_w = masked_sum(bounded, x.mask, dim=-1).clamp(*SEQ_LOG_BOUNDS)",
             "log_w = (masked_sum(bounded, x.mask, dim=-1) / x.mask.sum(-1)).clamp(*SEQ_LOG_BOUNDS)"),), NEW_TESTS),
    Mutant("loo-includes-itself", "the leave-one-out baseline averages the whole group (GRPO's mean, unscaled)",
           (("algos/advantages.py", "adv = grouped - (grouped.sum(dim=-1, keepdim=True) - grouped) / (g - 1)",
             "adv = grouped - grouped.mean(dim=-1, keepdim=True)"),), NEW_TESTS),
    Mutant("unbiased-kl-ignored", "algo.kl_unbiased never weights the KL term by pi / pi_old",
           (("algos/common.py", "kl_beta=self.kl_beta, old_logp=self.old_logp if self.kl_unbiased else None)",
             "kl_beta=self.kl_beta, old_logp=None)"),), ("tests/algos/test_algos_unbiased_kl.py",)),
    Mutant("unbiased-kl-detached-ratio", "the unbiased KL's ratio carries no gradient (TRL's and the paper's do)",
           (("algos/common.py", "kl = torch.exp(token_log_ratio(logp, old_logp, mask).clamp(max=MAX_LOG_RATIO)) * kl",
             "kl = torch.exp(token_log_ratio(logp, old_logp, mask).clamp(max=MAX_LOG_RATIO)).detach() * kl"),),
           ("tests/algos/test_algos_unbiased_kl.py",)),
]
LAST_TESTS = ("tests/algos/test_algos_family_2026c.py",)
MUTANTS += [
    Mutant("dppo-ipo-ignored", "DPPO's sides=ipo keeps DPPO's sign-gated mask (prime-rl's sign-free mask never applies)",
           (("algos/dppo.py", "        keep = ~beyond  # prime-rl's IPO mask", "        keep = keep  # prime-rl's IPO mask"),),
           LAST_TESTS),
    Mutant("dppo-ipo-metrics-by-sign", "under sides=ipo the drops are counted by the advantage's sign, not the move",
           (("algos/dppo.py", "up = rose if ipo else adv > 0", "up = adv > 0"),), LAST_TESTS),
    Mutant("dppo-kl-tau-detached", "DPPO's squared log-ratio term carries no gradient",
           (("algos/dppo.py", "reduce_tokens(log_ratio.square())", "reduce_tokens(log_ratio.detach().square())"),),
           LAST_TESTS),
    Mutant("dro-penalty-sign", "DRO's quadratic term rewards drift instead of pulling back",
           (("algos/dro.py", "logp - 0.5 * beta * log_ratio", "logp + 0.5 * beta * log_ratio"),), LAST_TESTS),
    Mutant("icepop-at-pi-old", "IcePop's ratio is taken against pi_old, not the sampler's log-probs",
           (("algos/icepop.py", "token_log_ratio(x.logp, x.rollout_logp(), x.mask)",
             "token_log_ratio(x.logp, x.old_logp, x.mask)"),), LAST_TESTS),
    Mutant("icepop-no-mask", "IcePop's band masks nothing (GRPO's clip at the sampler alone)",
           (("algos/icepop.py", "objective = inside.to(ratio.dtype) * clipped_objective", "objective = clipped_objective"),),
           LAST_TESTS),
    Mutant("seq-mean-token-sum-normalised", "seq_mean_token_sum divides each sequence by its length (token-mean's)",
           (("algos/common.py", "        per_seq = masked_sum(values, mask, dim=-1)\n    else:",
             "        per_seq = masked_sum(values, mask, dim=-1) / seq_lengths(mask)\n    else:"),), LAST_TESTS),
    Mutant("entropy-bonus-sign", "the entropy bonus is added to the loss (an entropy penalty)",
           (("algos/common.py", "loss = loss - self.entropy_coef * reduce_tokens", "loss = loss + self.entropy_coef * reduce_tokens"),),
           LAST_TESTS),
    Mutant("entropy-bonus-detached", "the update's entropy carries no gradient (the bonus moves no parameter)",
           (("trainer/model/logprobs.py", "    if entropy_grad:", "    if False:"),),
           ("tests/trainer/step/test_update.py::test_entropy_bonus_reaches_the_parameters",)),
    Mutant("pairs-singleton-uncompared", "an arm alone in its stratum is compared with nothing (6 of family2026b's 10)",
           (("report/arms.py", "        if not others and based and arm is not arms[0]:",
             "        if False:"),),
           ("tests/study/test_plan.py::test_the_plan_registers_the_comparisons_the_page_makes_from_the_arms_configs",)),
    Mutant("pairs-singleton-farthest", "an arm alone in its stratum is compared with the first stratum's baseline, "
           "whatever its lag", (("report/arms.py", "near = min(based, key=", "near = min(based[:1], key="),),
           ("tests/study/test_plan.py::test_the_plan_registers_the_comparisons_the_page_makes_from_the_arms_configs",)),
]


def _apply(mutant: Mutant, originals: dict[str, str]) -> None:
    for file, old, new in mutant.edits:
        path = ROOT / file
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{mutant.name}: {file} holds {text.count(old)} copies of {old!r}; fix the list")
        originals.setdefault(file, text)
        path.write_text(text.replace(old, new))


def _restore(originals: dict[str, str]) -> None:
    for file, text in originals.items():
        (ROOT / file).write_text(text)


def _restore_backup() -> None:
    if BACKUP.exists():
        _restore(json.loads(BACKUP.read_text()))
        BACKUP.unlink()
        print("restored files a killed run had left changed")


def _first_failure(output: str) -> str | None:
    found = re.search(r"^FAILED (\S+)", output, re.M) or re.search(r"^ERROR (\S+)", output, re.M)
    return found.group(1) if found else None


def _failures(output: str) -> list[str]:
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)


def run(mutant: Mutant, *, stop_first: bool = True) -> tuple[str, str | None, float]:
    originals: dict[str, str] = {}
    started = time.monotonic()
    try:
        _apply(mutant, originals)
        BACKUP.write_text(json.dumps(originals))
        proc = subprocess.run([sys.executable, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-p",
                               "no:cacheprovider", *mutant.tests],
                              cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        out = proc.stdout + proc.stderr
        status = "caught" if proc.returncode != 0 else "NOT CAUGHT"
        culprit = (_first_failure(out) if stop_first else ", ".join(_failures(out))) if proc.returncode != 0 else None
        if proc.returncode not in (0, 1):
            culprit = f"{culprit} (pytest exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        status, culprit = "caught", f"timeout after {TIMEOUT_S} s"
    finally:
        _restore(originals)
        BACKUP.unlink(missing_ok=True)
    return status, culprit, time.monotonic() - started


def main(words: list[str]) -> int:
    stop_first = "--all" not in words
    words = [w for w in words if w != "--all"]
    lock = LOCK.open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit("another mutation run is in progress in this tree") from None
    _restore_backup()
    before = {f: (ROOT / f).read_bytes() for m in MUTANTS for f, _, _ in m.edits}
    chosen = [m for m in MUTANTS if not words or any(w in m.name for w in words)]
    missed = []
    for mutant in chosen:
        status, culprit, seconds = run(mutant, stop_first=stop_first)
        print(f"{mutant.name:32s} {status:10s} {seconds:6.1f}s  {culprit or ''}  ({mutant.why})", flush=True)
        if status != "caught":
            missed.append(mutant.name)
    changed = [f for f, data in before.items() if (ROOT / f).read_bytes() != data]
    assert not changed, f"files left changed: {changed}"
    print(f"\n{len(chosen) - len(missed)}/{len(chosen)} breakages caught" + (f"; not caught: {', '.join(missed)}"
                                                                          if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
