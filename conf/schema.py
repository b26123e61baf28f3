"""Structured configs: the one source of defaults (yaml presets override only what differs).

Registered in Hydra's ConfigStore as ``base_config``; `conf/config.yaml` builds on it, and each group
yaml (algo/, model/, task/, rollout/, logger/) is merged into the typed node, so an unknown key or a
wrong type is rejected when the config is composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class CorrectionConfig:
    """The training-inference mismatch corrected (gspo.algos.corrections): the sampler's log-probs against the
    trainer's recomputed old ones, so it needs algo.old_logp_source=engine; the loss then uses the trainer's."""

    kind: str = "none"  # none; tis: each term times sg(min(rho, cap)); mis (masked IS; IcePop at token level): sg(rho) inside [low, high], 0 outside; mask: 1 inside, 0 outside; geo_rs: mask at the geometric level (Geo-RS); k3_rs: a sequence kept only if its mean k3(rho) <= cap and no token's rho < low (a trust-region mask with a token veto); geo_rs_tis: Geo-RS's band and TIS's cap at once (one weight per sequence); rho = pi_old / pi_sampler
    level: str = "auto"  # auto: the algorithm's ratio level (geometric for gspo, gspo_token, gmpo and for geo_rs; token otherwise, opsm included); token: one weight per token; sequence: the product of the token ratios, one per sequence; geometric: their geometric mean, one per sequence
    cap: float | None = None  # tis: weights above it are truncated to it; None: the level's default (gspo.vocab.choices CORRECTION_BOUNDS: 2 token / sequence, 1.001 geometric)
    low: float | None = None  # mis, mask, geo_rs: ratios below it mask their term; None: the level's default (0.5; 0.999 geometric)
    high: float | None = None  # mis, mask, geo_rs: ratios above it mask their term; None: the level's default (2, mis at token level 5 as IcePop; 1.001 geometric)


@dataclass
class AlgoConfig:
    name: str = MISSING  # a name registered in gspo.algos, declared by an algo/ preset (gspo train --help lists the presets)
    clip_low: float = MISSING  # ratio may fall to 1 - clip_low before the clipped branch takes over (gmpo: a log-ratio bound; cispo: 1.0 is no bound; sapo: the reported band only; dppo_tv / dppo_kl: the divergence threshold for A <= 0, as verl reads it)
    clip_high: float = MISSING  # ratio may rise to 1 + clip_high (cispo: the weight is capped at 1 + clip_high, so the preset's 4 caps at 5, as TRL's epsilon_high=5; dppo_tv / dppo_kl: the divergence threshold for A > 0)
    options: dict[str, Any] = field(default_factory=dict)  # the algorithm's own options, the fields of its options dataclass in gspo.algos (its preset lists them)
    kl_beta: float = 0.0  # k3 KL to the reference (initial) model; 0 as in the GSPO paper
    entropy_coef: float = 0.0  # an entropy bonus: the loss less this x the sampling distribution's entropy per token, reduced like J (verl's entropy_coeff, prime-rl's entropy_coef); 0: none, and the entropy is not computed
    kl_unbiased: bool = False  # the KL term's k3 weighted by pi / pi_old per token (DeepSeek-V3.2 eq. 7, TRL's use_bias_correction_kl, on by default there)
    advantage: str = "group"  # estimator: group (one value per sequence), step (per scratchpad step, per token; gspo_token) or gdpo (each reward component normalised in its group, summed, batch-normalised; GDPO)
    adv_eps: float = 1e-6  # added to the group std (Bessel) before dividing
    adv_scale: str = "std"  # std: (r - mean) / (std + eps); none: r - mean (Dr.GRPO); mean: (r - mean) / mean (MaxRL; rewards in [0, 1])
    old_logp_source: str = "auto"  # auto: the sampler's own where they are the trainer's to fp tolerance (lean hf sampler, fp32), else a trainer forward; recompute: always a trainer forward; engine: the sampler's own whatever its precision (paper sec. 5.3), the mismatch logged
    routing_replay: str = "none"  # MoE only: none; trainer (R2, GSPO paper sec. 4.3): the old policy's experts from its scoring forward, replayed in the update's; rollout (R3, arXiv 2510.11370): the experts the hf sampler chose while decoding, replayed in the old-log-prob and update forwards
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)  # mismatch correction of engine log-probs (TIS / MIS / mask / Geo-RS)


@dataclass
class TinyModelConfig:
    """The embedded model: a Qwen3-architecture transformer with a character tokenizer, cold-started
    by a short supervised fine-tune on worked solutions. The defaults' starts ship with gspo (trainer/model/starts:
    the same weights on every machine); any other setting here is built on first use and cached."""

    hidden_size: int = 128  # width of the residual stream
    num_layers: int = 4  # transformer blocks
    intermediate_size: int = 512  # dense MLP width
    num_heads: int = 4  # attention heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    num_experts: int = 0  # 0: dense MLPs; > 0: Qwen3-MoE with this many experts in every layer (model=tiny-moe)
    experts_per_token: int = 2  # MoE top-k
    moe_intermediate_size: int = 128  # each expert's MLP width
    sft_lr: float = 3e-3  # learning rate of the cold-start fine-tune
    sft_batch_size: int = 32  # worked solutions per cold-start step
    sft_max_steps: int = 1500  # upper bound on cold-start steps
    sft_eval_every: int = 25  # cold-start steps between dev-set checks
    sft_eval_max_loss: float = 0.3  # sample the dev set only once the mean SFT loss is below this
    sft_target_accuracy: float = 0.2  # stop once dev-set sampled accuracy reaches this: RL starts sometimes right
    sft_seed: int = 0  # seed of the cold start (shipped for the defaults, else cached per setting)
    cache_dir: str | None = None  # where non-default cold starts are built; default: $GSPO_CACHE or ~/.cache/gspo


@dataclass
class LoraConfig:
    """LoRA adapters (peft): only they train; the KL reference is the base with adapters off."""

    r: int = 0  # adapter rank; 0: no LoRA, train every weight
    alpha: float = 16.0  # the update is scaled by alpha / r
    dropout: float = 0.0  # on the adapter's input; > 0 makes the update's log-probs differ from the old ones
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )  # linear modules (last part of the name) that get adapters


@dataclass
class ModelConfig:
    name: str | None = "tiny"  # "tiny" (embedded), a Hugging Face id, or a local path
    dtype: str = "float32"  # storage of the weights: float32, bfloat16 or float16 (compute: train.precision)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, more time)
    trust_remote_code: bool = False  # let transformers run the model repository's own code
    chat_template: bool = False  # wrap prompts in the tokenizer's chat template
    attn_implementation: str | None = None  # e.g. sdpa, flash_attention_2; None: transformers' default
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)  # the embedded model (model.name=tiny)
    lora: LoraConfig = field(default_factory=LoraConfig)  # LoRA adapters (r=0: off)


@dataclass
class TaskConfig:
    kind: str = "arith"  # arith (embedded), math or code (a Hugging Face dataset id or local JSONL)
    name: str = "arith"  # used in metric names: eval/<name>/accuracy, reward/<name>
    min_digits: int = 3  # arith: fewest digits of an operand
    max_digits: int = 5  # arith: most digits of an operand
    ops: str = "+*"  # arith: operations drawn from (+: two numbers, *: a number times a digit)
    dataset: str | None = None  # math, code: Hugging Face dataset id or local .jsonl/.json path
    subset: str | None = None  # math, code: the hub dataset's subset (configuration)
    split: str = "train"  # math, code: the split training prompts come from
    eval_split: str | None = None  # None: hold out eval_size rows of `split`
    question_field: str = "problem"  # math: the column holding the question
    answer_field: str = "answer"  # math: the column holding the gold answer
    prompt_template: str = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."  # math: {question} is replaced
    benchmark: str = "livecodebench"  # layout of task.dataset: livecodebench or codeforces (as gspo eval reads them)
    code_reward: str = "all"  # all: 1 when every test passes, else 0; fraction: share of tests passed
    timeout_s: float = 6.0  # CPU seconds per test (LiveCodeBench's); CodeForces problems use their own limit
    workers: int = 2  # completions graded in parallel, one sandbox each
    eval_size: int = 256  # held-out prompts evaluated at step 0, every train.eval_every steps and at the end


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf (transformers.generate) or vllm
    temperature: float = 1.0  # sampling temperature of the rollouts (log-probs are scored at the same one)
    top_p: float = 1.0  # nucleus sampling (log-probs are renormalised over the same nucleus)
    max_new_tokens: int = 64  # completion budget; longer completions are truncated
    dtype: str = "auto"  # hf engine: auto (the model's) or bfloat16/float16 autocast, a sampler less precise than the trainer
    batch_size: int = 256  # completions generated per generate() call
    sampler: str = "lean"  # hf engine: lean (its own KV-cache decoding loop, same draws as generate) or generate (transformers')
    kv_cache: str = "auto"  # hf lean sampler: static (transformers' StaticCache, widths in buckets of 64; each decode step one CUDA graph on CUDA), dynamic (grown per token); auto: static on CUDA, dynamic elsewhere (faster on the CPU, measured); same tokens either way
    gpu_memory_utilization: float = 0.5  # vllm: share of GPU memory vLLM may take
    tensor_parallel_size: int = 1  # vllm: GPUs one model is split over
    vllm_dtype: str = "auto"  # vllm: its weights' dtype (auto: the model's)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the tokenizer's chat template where model.chat_template is on, e.g. {enable_thinking: false} for Qwen3 (verl: data.apply_chat_template_kwargs)
    vllm_sleep: bool | None = None  # free vLLM's GPU memory (sleep level 1) from each rollout to the next weight sync; None: where the platform has a sleep mode (GPUs), not on the CPU
    vllm_eager: bool | None = None  # vllm: no torch.compile / CUDA graphs; None: eager on the CPU (compiling costs ~50 s of start-up there), compiled on GPUs
    vllm_sync: str = "auto"  # vllm weight sync: load_weights (the model's own loader, in place; GPUs), reload (vLLM's layerwise reload, which re-processes repacked CPU weights); auto: reload on the CPU, load_weights elsewhere
    dynamic_sampling: bool = False  # DAPO (sec. 3.2), any algorithm: drop groups whose rewards are all equal (no signal) and draw more prompts until train.prompts_per_step groups are kept or max_draws rounds are spent; one process only
    max_draws: int = 3  # dynamic sampling's budget: rounds of train.prompts_per_step prompts one step may draw (verl's max_num_gen_batches); a batch still short is completed with dropped groups
    lag: int = 0  # rollouts k updates behind (trainer/step/lagged.py, docs/async.md): step t's batch is drawn by step t-k's weights while the trainer updates, its log-probs the behaviour policy's (pi_s); 0: each batch from the current weights
    overlong_buffer: float = 0.0  # DAPO's soft overlong punishment (sec. 3.4), any algorithm: over the last this share of max_new_tokens the reward falls linearly by up to 1 (DAPO: 4096/20480 = 0.2); 0: off


@dataclass
class LoggerConfig:
    wandb: str = "auto"  # auto: online when WANDB_API_KEY is set, offline otherwise; online; offline; disabled
    project: str = "gspo"  # W&B project
    entity: str | None = None  # W&B entity (team or user); None: the key's default
    group: str | None = None  # W&B group; None: the sweep's, or the run's own id
    tags: list[str] = field(default_factory=list)  # extra W&B tags (the algorithm and swept values are added)
    progress: bool = True  # rich progress bar
    samples_per_step: int = 4  # completions written to samples.jsonl per step


@dataclass
class CollapseConfig:
    """When a run counts as collapsed (trainer/run/collapse.py); defaults fire on the high-lr collapses measured
    on the embedded task and stay silent on its default runs."""

    enabled: bool = True  # watch for a collapse at all
    window: int = 5  # steps in the training reward's moving average
    patience: int = 5  # steps the average must stay low before it counts
    reward_drop: float = 0.5  # collapsed below (1 - reward_drop) x the best moving average
    eval_drop: float = 0.5  # collapsed when held-out accuracy falls below (1 - eval_drop) x its best
    min_best: float = 0.05  # rules on reward and accuracy apply once their best reaches this
    entropy_min: float = 0.005  # nats per token: below is an entropy collapse (the default run starts near 0.07)
    entropy_max_factor: float = 3.0  # above this x the first step's entropy is an explosion
    truncated_max: float = 0.9  # this share of completions hitting max_new_tokens is a length blow-up


@dataclass
class TrainConfig:
    steps: int = 50  # rollout batches; one metrics row each
    prompts_per_step: int = 16  # B
    group_size: int = 8  # G completions per prompt
    minibatches: int = 4  # M updates per rollout batch (GSPO paper, sec. 5); M=1, E=1 is on-policy
    epochs: int = 1  # E passes over the rollout batch
    micro_batch_size: int | None = None  # gradient accumulation inside a minibatch; None: whole minibatch
    lr: float = 1e-4  # AdamW learning rate (after warmup)
    lr_schedule: str = "constant"  # constant, linear, cosine (after warmup)
    warmup_steps: int = 0  # optimizer steps
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # AdamW (beta1, beta2)
    max_grad_norm: float = 1.0  # gradients are clipped to this global norm before each optimizer step
    eval_every: int = 10  # steps; 0 disables periodic eval (step 0 and the end still run)
    eval_greedy: bool = True  # also report greedy accuracy
    eval_k: int = 1  # samples per held-out problem at the training temperature; accuracy is their mean (avg@k), whose eval-sampling variance falls as 1/k (the report splits the accuracy's variance into eval sampling and training seed)
    final_eval_k: int = 16  # samples per held-out problem at the run's last eval (train.steps, or the step a rule stopped it at; eval_k before): the eval a report's verdict reads, so its eval-sampling noise, about 3/4 of a paired difference's variance at k=4 on 128 problems (issue 45), is cut 4x; its per-sample outcomes are recorded (evals.jsonl `outcomes`)
    save_every: int = 10  # steps between checkpoints (a killed run resumes from the last); 0: only the final one
    keep_checkpoints: int = 2  # newest checkpoints kept; older ones are deleted
    on_nonfinite: str = "stop"  # a NaN/inf reward, log-prob, loss or gradient: stop (run failed) or skip the batch (undone whole; keeps a copy of the weights and optimizer state)
    logprob_chunk: int = 1024  # tokens per chunk when computing log-probs (bounds the [*, V] logits)
    compile: bool = False  # torch.compile the model body for the update's forwards (kept under <cache dir>/inductor for later processes): on the embedded model's CPU benchmark the update takes 0.38 s instead of 0.52 s per step after ~16 s (warm cache) or ~66 s (cold) of compilation, so it pays back after ~90 steps; off: the default run is 50 (perf/compile_payback.py)
    fsdp: bool = False  # under torchrun: shard weights, gradients and optimizer state across the ranks (FSDP2 fully_shard; DCP checkpoints, gspo export-hf), for models that do not fit one device
    precision: str = "auto"  # compute: fp32, bf16 (autocast), fp16 (autocast + loss scale); auto: model.dtype's; master weights stay fp32
    collapse: CollapseConfig = field(default_factory=CollapseConfig)  # detection, logged to run.json
    stop_on_collapse: bool = False  # end the run (status finished, stopped: collapse) once it has collapsed
    past_stop: bool = False  # resume= of a run a rule stopped (stopped: collapse, nonfinite in run.json): train on past the stop; a bare resume leaves a stopped run stopped


@dataclass
class EvalConfig:
    benches: list[str] = field(default_factory=list)  # benchmarks of gspo eval, and extra ones during training: arith, aime24, aime25, math500, livecodebench, codeforces
    k: int = 1  # samples per problem
    limit: int | None = None  # problems per benchmark
    greedy: bool = False  # decode the benchmarks greedily (temperature 0) instead of sampling at rollout.temperature
    max_new_tokens: int | None = None  # None: rollout.max_new_tokens
    workers: int = 2  # grading processes
    paths: dict[str, str] = field(default_factory=dict)  # bench -> local file overriding the hub id
    weak_sandbox: bool = False  # run model-written code without strong isolation (as GSPO_SANDBOX_WEAK=1)
    run: str | None = None  # gspo eval: a run directory; its newest checkpoint (refused if damaged) is evaluated under the run's own config
    step: int | None = None  # gspo eval with eval.run: the checkpoint step to evaluate; None: the newest
    output: str | None = None  # gspo eval: where evals.jsonl goes; None: the run of eval.run, else results/evals/<time>-<model>


@dataclass
class VerdictConfig:
    """How `gspo compare` and `gspo report` reach a verdict (`gspo compare verdict.until=resolved ...`); not part
    of a run's config: the same runs may be judged with another effect of interest."""

    effect: float = 0.02  # the smallest difference of interest in a score's own units (held-out accuracy, reward: 0.02 = 2 points): "equivalent" means within +-effect. Default: a difference under 2 points would rarely change which objective one picks when seeds alone swing small-benchmark accuracy by 5-15 points (arXiv 2504.07086), and it is half the eval-sampling sd of one single-sample eval on 128 problems (0.042); set it to what matters on your task
    until: str = "none"  # none: one round of the preset's seeds; resolved: add seeds to every arm in rounds until each verdict of `metric` is resolved or shown equivalent within +-effect, or the budget is spent (group-sequential, Lan-DeMets alpha spending)
    max_seeds: int = 12  # until=resolved: seeds per arm at most (the last round spends what alpha is left)
    round_seeds: int = 3  # until=resolved: seeds added to every arm per round
    max_minutes: float | None = None  # until=resolved: no new round starts once this much wall time has passed
    spending: str = "pocock"  # until=resolved: alpha spending of the looks, pocock or obrien_fleming (Lan & DeMets 1983); pocock, whose 6-seed look can claim (docs/verdicts.md)
    primary: str | None = None  # the page's one primary score: the verdict calls only its comparisons resolved (other scores are exploratory) and until=resolved answers it; auc:<held-out metric> (auc:eval/arith/accuracy): the area under its curve over training, a sample-efficiency score read by the same paired machinery (gspo report --primary); None: eval/<task>/accuracy


@dataclass
class Config:
    algo: AlgoConfig = field(default_factory=AlgoConfig)  # the policy loss and its advantages (group algo=)
    model: ModelConfig = field(default_factory=ModelConfig)  # the policy (group model=)
    task: TaskConfig = field(default_factory=TaskConfig)  # prompts, rewards and the held-out set (group task=)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # how completions are sampled (group rollout=)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # W&B and local logs (group logger=)
    train: TrainConfig = field(default_factory=TrainConfig)  # the update: batch shape, optimizer, checkpoints
    eval: EvalConfig = field(default_factory=EvalConfig)  # benchmark evals (gspo eval, and during training)
    seed: int = 0  # every random draw of the run derives from (seed, step)
    device: str = "auto"  # auto: cuda when available, else cpu
    output_dir: str = "results/runs"  # runs go to <output_dir>/<run_id>/, relative to the current directory
    run_id: str | None = None  # None: <time>-<algo>-s<seed>
    resume: bool = False  # continue run_id from its last checkpoint
    objective: str | None = None  # metric a sweep job returns to a search sweeper (Optuna): its last value; None: eval/<task>/accuracy


def register_configs() -> None:
    ConfigStore.instance().store(name="base_config", node=Config)
