"""The GRPO run of an agent inside the world model: one config, one ``swift rlhf --rlhf_type grpo`` command line.

Every knob is a field of :class:`GRPOConfig` with the paper's default and the environment variable
the shell launchers have always read (``MODEL_PATH``, ``DATA``, ``WM_ENDPOINT``, ``NUM_GPUS``, ``LR``,
...), so ``sciworld/run_sciworld_qwen3_grpo.sh`` only exports its model's defaults and runs

    python -m textwm.rl.launch --env sciworld [--flag VALUE ...] [-- extra swift arguments]

The plugin is the library's own file (:mod:`textwm.rl.swift_plugin`): nothing here needs a checkout.
GPU layout: ``NUM_GPUS`` > 1 makes swift re-launch itself under torchrun (``NPROC_PER_NODE``,
``MASTER_PORT``); ``NUM_GPUS=0`` hides the GPUs and runs in float32 without vLLM (tiny models only).
Outputs: ``$OUTPUT_DIR/v<N>-<timestamp>/`` (checkpoints, ``logging.jsonl``, ``completions.jsonl``,
``trajectories.jsonl``).

Before swift starts, rows without a simulator start state (the paper's released
``sciworld_rl_split.jsonl``) are completed once from the real env into the start-state cache
(:mod:`textwm.envs.sim_cache`, a progress bar), which the scheduler then reads; ``DATA`` is passed to
swift as it is. ``--env-url`` (default: the env's replay switch, ``$SCIWORLD_ENV_URL`` for ScienceWorld)
makes the reward replay each episode in that real env server (:mod:`textwm.rl.replay`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from textwm.config import ConfigError, option
from textwm.data.jsonl import DataError, read_json, write_json
from textwm.envs.registry import env_names, get_env
from textwm.envs.sim_cache import CACHE_DIR_ENV, SimTaskCache, complete_file
from textwm.rl.real_rollouts import REAL_ENV_URL_VAR, REAL_SESSIONS, REAL_SESSIONS_VAR, ROLLOUT_ENV_VAR
from textwm.rl.swift_adapters import REWARD_RULE_VAR
from textwm.swift_launch import (
    SwiftRunConfig,
    apply_gpu_layout,
    default_swift,
    knob,
    launcher_main,
    warn_no_gpu,
)

log = logging.getLogger(__name__)

PLUGIN = Path(__file__).resolve().with_name("swift_plugin.py")


def default_data(root: str, env: str, paper_data: str, built: str) -> str:
    """``DATA`` when unset: the first of the paper's file names (``paper_data``, space-separated) found in
    ``<root>/<env>/data/``, as the paper's run scripts read ``data/<name>`` from the env folder; else our builder's
    ``<root>/runs/<env>_data/<built>``."""
    for name in paper_data.split():
        path = Path(root or ".") / env / "data" / name
        if path.is_file():
            return str(path)
    return str(Path(root or ".") / "runs" / f"{env}_data" / built)


#: ms-swift's model type and chat template by a checkpoint's architecture (``config.json`` model_type), for the
#: agents trained here: Qwen3 ones (the tiny agents, ChatML with Qwen's tokens) take swift's qwen3 pair; Llama ones
#: with a ChatML chat template (SmolLM2-135M-Instruct, ``textwm.models.pretrained``) take llama and chatml.
SWIFT_MODEL_ARGS = {"qwen3": ("qwen3", "qwen3"), "llama": ("llama", "chatml")}


def swift_model_args(model_path: str | os.PathLike) -> tuple[str, str]:
    """(ms-swift ``--model_type``, ``--template``) of an agent checkpoint, by :data:`SWIFT_MODEL_ARGS`.

    Raises:
        ConfigError: an architecture with no entry (name the pair with --model-type and --template).
    """

    model_type = read_json(Path(model_path) / "config.json").get("model_type")
    if model_type not in SWIFT_MODEL_ARGS:
        raise ConfigError(f"{model_path}: no ms-swift model type and template known for model_type {model_type!r} "
                          f"(known: {', '.join(SWIFT_MODEL_ARGS)}); give them with --model-type and --template")
    return SWIFT_MODEL_ARGS[model_type]


@dataclass
class AgentRunConfig(SwiftRunConfig):
    """What a swift run of an agent (its SFT, its GRPO) is configured by whatever the stage: the env, the model, and
    :class:`~textwm.swift_launch.SwiftRunConfig`'s paths, GPUs and executable. Each field's default can come from the
    environment variable the shell launchers have always read."""

    env: str = option("", "the env (a registered name, e.g. sciworld)")
    model_path: str = knob("Qwen/Qwen3-4B-Instruct-2507", "the agent to train", "MODEL_PATH")
    template: str = knob("qwen3_nothinking", "ms-swift chat template", "TEMPLATE")
    root: str = knob("", "the folder the default paths are under (DATA, OUTPUT_DIR; default: the current one)",
                      "TEXTWM_ROOT")
    output_dir: str = knob("", "outputs (default: <root>/runs/<env>/<run name>)", "OUTPUT_DIR")
    seed: int = knob(42, "seed", "SEED")
    logging_steps: int = knob(1, "log every N steps", "LOGGING_STEPS")

    def default_output_dir(self, run_name: str) -> str:
        """``<root>/runs/<env>/<run name>``: where a run writes when OUTPUT_DIR is unset."""
        return self.output_dir or str(Path(self.root or ".") / "runs" / self.env / run_name)


@dataclass
class GRPOConfig(AgentRunConfig):
    """GRPO of an agent LLM inside the world model (swift rlhf): every env step answered by the simulator."""

    data: str = knob("", "RL task rows (rl_train.jsonl of <env>/build_wm_dataset.py, or the paper's released "
                          "rows)", "DATA")
    paper_data: str = knob("", "the paper's names of the RL rows file (space-separated), named when DATA is missing; "
                                "the shell launchers default DATA to the first of them in <env>/data/", "PAPER_DATA")
    stop_words: str = knob("<|im_end|> <|endoftext|>", "stop words, space-separated", "STOP_WORDS")
    wm_endpoint: str = knob("http://127.0.0.1:30000/", "the WM proxy", "WM_ENDPOINT")
    wm_max_tokens: int | None = knob(None, "longest WM observation in tokens (default: the plugin's, 256)",
                                      "WM_MAX_TOKENS")
    wm_temperature: float = knob(0.7, "the world model's sampling temperature in rollouts (0: greedy; above 0 a "
                                        "group's episodes meet different plausible worlds)", "WM_TEMPERATURE")
    wm_top_p: float | None = knob(None, "the world model's nucleus sampling (default: the server's, 1.0)", "WM_TOP_P")
    wm_diffusion_steps: int | None = knob(None, "denoising steps per block of a diffusion world model (default: the "
                                                 "server's)", "WM_DIFFUSION_STEPS")
    wm_guard: str = option("", "1: local responder first; 0: every step to the WM (default: $<ENV>_WM_GUARD, "
                               "e.g. SCIWORLD_WM_GUARD, or 1)")
    reward: str = knob("ours", "the reward rule: ours (the env's reward of the outcome; python -m textwm.rl.rewards "
                                "prints it) or paper (the paper's plugin's rule, where written)", "REWARD_RULE",
                        choices=("ours", "paper"))
    rollout_env: str = knob("wm", "where rollouts are played: wm (the simulator: local responder, then the world "
                                  "model) or real (every action in the env server at --real-env-url)", "ROLLOUT_ENV",
                             choices=("wm", "real"))
    real_env_url: str = knob("", "the env server of real rollouts (python <env>/<env>_env_server.py)", "REAL_ENV_URL")
    env_url: str = option("", "real env server whose replay of each episode gives the reward (default: the env's "
                              "switch, $SCIWORLD_ENV_URL for sciworld; empty: the simulated trajectory's reward)")
    sim_cache: str = knob("", "cache of simulator start states built for rows that lack them (default: "
                               "$TEXTWM_CACHE/sim_tasks, else ~/.cache/textwm/sim_tasks)", "TEXTWM_SIM_CACHE")
    sim_workers: int = knob(2, "real envs building missing start states at once, before swift starts",
                             "SIM_WORKERS")
    run_name: str = knob("", "run name (default: <env>_grpo)", "RUN_NAME")
    torch_dtype: str = knob("", "the weights' dtype (default: float32, under bf16 autocast on GPU; bfloat16 with "
                                 "DeepSpeed, which keeps float32 master weights). Float32 weights, gradients and "
                                 "AdamW take ~16 bytes a parameter (a 4B agent ~64 GB): for such an agent on one "
                                 "GPU use DEEPSPEED with OFFLOAD_OPTIMIZER, or bfloat16 (which loses small updates)",
                             "TORCH_DTYPE")
    use_vllm: bool | None = knob(None, "rollouts with vLLM (default: on GPU)", "USE_VLLM")
    vllm_mode: str = knob("colocate", "vLLM mode", "VLLM_MODE")
    vllm_gpu_memory_utilization: float = knob(0.3, "vLLM share of GPU memory", "VLLM_GPU_MEMORY_UTILIZATION")
    vllm_max_model_len: int = knob(16384, "vLLM context length", "VLLM_MAX_MODEL_LEN")
    sleep_level: int = knob(1, "vLLM sleep level between rollouts", "SLEEP_LEVEL")
    deepspeed: str = knob("", "DeepSpeed config across GPUs: zero2, zero3 (ms-swift's names) or a JSON file; "
                                "auto: zero2 on more than one GPU; empty or none: off", "DEEPSPEED")
    offload_model: bool = knob(False, "offload the model during rollouts", "OFFLOAD_MODEL")
    offload_optimizer: bool = knob(False, "offload the optimizer during rollouts", "OFFLOAD_OPTIMIZER")
    max_turns: int = knob(50, "agent turns per episode at most", "MAX_TURNS")
    num_generations: int = knob(8, "episodes per task (the GRPO group)", "NUM_GENERATIONS")
    max_completion_length: int = knob(256, "tokens per agent turn at most", "MAX_COMPLETION_LENGTH")
    max_length: int = knob(16384, "tokens per episode at most", "MAX_LENGTH")
    epochs: float = knob(3, "passes over the task rows", "EPOCHS")
    per_device_train_batch_size: int = knob(1, "episodes per device per step", "PER_DEVICE_TRAIN_BATCH_SIZE")
    grad_accum_steps: int = knob(8, "micro-batches per optimizer step", "GRAD_ACCUM_STEPS")
    lr: float = knob(1e-6, "learning rate", "LR")
    lr_sched: str = knob("constant", "learning-rate schedule", "LR_SCHED")
    warmup_ratio: float = knob(0.05, "share of steps for warm-up", "WARMUP_RATIO")
    max_grad_norm: float = knob(0.5, "gradient clipping", "MAX_GRAD_NORM")
    beta: float = knob(0.1, "KL coefficient", "BETA")
    temperature: float = knob(0.9, "rollout temperature", "TEMPERATURE")
    top_p: float = knob(0.95, "rollout nucleus sampling", "TOP_P")
    num_iterations: int = knob(1, "GRPO iterations per batch", "NUM_ITERATIONS")
    tasks_per_step: int = knob(0, "tasks (GRPO groups) per optimizer step; sets grad_accum_steps to tasks x "
                                   "num_generations / (per_device_train_batch_size x GPUs) (0: grad_accum_steps as "
                                   "given)", "TASKS_PER_STEP")
    dynamic_sample: bool = knob(True, "drop groups whose episodes all got the same reward (no gradient) and "
                                       "generate new ones in their place (ms-swift's dynamic sampling)",
                                 "DYNAMIC_SAMPLE")
    max_resample_times: int = knob(3, "dynamic sampling: new generation rounds per batch at most", "MAX_RESAMPLE_TIMES")
    log_entropy: bool = knob(True, "log the policy's token entropy per step (entropy/mean in logging.jsonl)",
                              "LOG_ENTROPY")
    gradient_checkpointing: bool | None = knob(None, "default: on GPU", "GRADIENT_CHECKPOINTING")
    save_steps: int = knob(20, "checkpoint every N steps", "SAVE_STEPS")
    save_total_limit: int = knob(3, "checkpoints kept", "SAVE_TOTAL_LIMIT")
    report_to: str = knob("", "none, wandb, tensorboard (default: wandb when WANDB_API_KEY is set, else tensorboard: "
                               "event files in <output_dir>/v<N>-<timestamp>/runs)", "REPORT_TO")

    def __post_init__(self) -> None:
        name = self.launcher or "textwm.rl.launch"
        if not self.env:
            raise ConfigError(f"{name}: no env; give --env NAME ({', '.join(env_names())})")
        self.data = self.data or default_data(self.root, self.env, self.paper_data, "rl_train.jsonl")
        if not Path(self.data).is_file():
            raise ConfigError(f"{name}: DATA '{self.data}' not found. {self._data_hint()}")
        if self.wm_guard not in ("", "0", "1"):
            raise ConfigError(f"must be 0 or 1, got {self.wm_guard!r}", key="--wm-guard")
        if self.rollout_env == "real" and not self.real_env_url:
            raise ConfigError("--rollout-env real needs the env server's URL (python <env>/<env>_env_server.py "
                              "--port 30003, then --real-env-url http://127.0.0.1:30003)", key="--real-env-url")
        if self.rollout_env == "real" and self.env_url:
            raise ConfigError("real rollouts already play every episode in the real env; a replay reward "
                              "(--env-url) would play it twice", key="--env-url")
        if self.reward == "paper" and self.env in env_names() and not get_env(self.env).has_paper_reward:
            raise ConfigError(f"the paper's reward rule is not written for {self.env} yet; use ours", key="--reward")
        if self.env_url and self.env in env_names() and not get_env(self.env).replay_url_env:
            raise ConfigError(f"env {self.env!r} has no replay reward; leave it empty", key="--env-url")
        if self.wm_temperature < 0:
            raise ConfigError(f"must be >= 0, got {self.wm_temperature}", key="WM_TEMPERATURE")
        if self.wm_top_p is not None and not 0 < self.wm_top_p <= 1:
            raise ConfigError(f"must be in (0, 1], got {self.wm_top_p}", key="WM_TOP_P")
        if self.wm_diffusion_steps is not None and self.wm_diffusion_steps < 1:
            raise ConfigError(f"must be >= 1, got {self.wm_diffusion_steps}", key="WM_DIFFUSION_STEPS")
        if self.tasks_per_step < 0 or self.max_resample_times < 1:
            raise ConfigError("TASKS_PER_STEP must be >= 0 and MAX_RESAMPLE_TIMES >= 1, got "
                              f"{self.tasks_per_step} and {self.max_resample_times}", key="TASKS_PER_STEP")
        for name in ("max_turns", "num_generations", "max_completion_length", "per_device_train_batch_size",
                     "grad_accum_steps", "sim_workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", key=name.upper())

    def _data_hint(self) -> str:
        """How to get the RL rows: our builder, the paper's released file (by its name), or DATA."""
        env = self.env
        hint = f"Build the RL rows from the real env with python {env}/build_wm_dataset.py --out-dir runs/{env}_data"
        if self.paper_data:
            hint += (f", or put the paper's released file ({self.paper_data}; the paper's data/ folder, or "
                     f"shared/data/ of a checkout that has it) in {env}/data/, where the launcher uses it when DATA "
                     "is unset")
        return hint + ", or point DATA at an rl_*.jsonl."

    # --- derived -------------------------------------------------------------------------------------

    def resolved(self) -> GRPOConfig:
        """The defaults that depend on the env and the GPUs, filled in."""
        gpu = self.gpus > 0
        run_name = self.run_name or f"{self.env}_grpo"
        switch = get_env(self.env).replay_url_env
        deepspeed = {"auto": "zero2" if self.gpus > 1 else "", "none": ""}.get(self.deepspeed, self.deepspeed)
        return dataclasses.replace(
            self, num_gpus=self.gpus, run_name=run_name, deepspeed=deepspeed,
            output_dir=self.default_output_dir(run_name),
            torch_dtype=self.torch_dtype or ("bfloat16" if gpu and deepspeed else "float32"),
            use_vllm=gpu if self.use_vllm is None else self.use_vllm,
            gradient_checkpointing=gpu if self.gradient_checkpointing is None else self.gradient_checkpointing,
            report_to=self.report_to or ("wandb" if os.environ.get("WANDB_API_KEY") else "tensorboard"),
            grad_accum_steps=self._grad_accum_steps(),
            wm_guard=self.wm_guard or os.environ.get(get_env(self.env).guard_env, "").strip() or "1",
            # Real rollouts reward the real trajectory already: a replay switch left in the shell does not apply.
            env_url="" if self.rollout_env == "real" else
            self.env_url or (os.environ.get(switch, "").strip() if switch else ""),
            swift=self.swift or default_swift())

    def _grad_accum_steps(self) -> int:
        """``grad_accum_steps``, or what ``tasks_per_step`` makes of it; ConfigError when a step would not hold
        whole groups (every task's ``num_generations`` episodes)."""
        per_pass = self.per_device_train_batch_size * max(1, self.gpus)
        steps = self.grad_accum_steps
        if self.tasks_per_step:
            steps, left = divmod(self.tasks_per_step * self.num_generations, per_pass)
            if left or steps < 1:
                raise ConfigError(f"{self.tasks_per_step} tasks x {self.num_generations} generations is not a multiple "
                                  f"of per_device_train_batch_size x GPUs ({per_pass})", key="TASKS_PER_STEP")
        if (per_pass * steps) % self.num_generations:
            raise ConfigError(f"a step of {per_pass * steps} episodes (per_device_train_batch_size x GPUs x "
                              f"grad_accum_steps) does not hold whole groups of {self.num_generations}",
                              key="NUM_GENERATIONS")
        return steps

    def tasks_per_optimizer_step(self) -> int:
        c = self.resolved()
        return c.per_device_train_batch_size * max(1, c.num_gpus) * c.grad_accum_steps // c.num_generations

    def argv(self, extra: list[str] = ()) -> list[str]:
        """The ``swift rlhf`` command line (of the resolved config)."""
        c = self.resolved()
        b = lambda v: "true" if v else "false"  # noqa: E731
        argv = [c.swift, "rlhf", "--rlhf_type", "grpo", "--model", c.model_path, "--template", c.template,
                "--use_hf", b(c.use_hf), "--check_model", b(c.check_model), "--external_plugins", str(PLUGIN),
                "--multi_turn_scheduler", f"{c.env}_scheduler", "--reward_funcs", f"{c.env}_reward",
                "--max_turns", str(c.max_turns), "--completion_length_limit_scope", "per_round",
                "--stop_words", *c.stop_words.split(), "--tuner_type", "full", "--use_vllm", b(c.use_vllm),
                "--offload_model", b(c.offload_model), "--offload_optimizer", b(c.offload_optimizer),
                "--torch_dtype", c.torch_dtype, "--dataset", c.data, "--split_dataset_ratio", "0",
                "--max_completion_length", str(c.max_completion_length), "--max_length", str(c.max_length),
                "--num_train_epochs", f"{c.epochs:g}", "--per_device_train_batch_size", str(c.per_device_train_batch_size),
                "--gradient_accumulation_steps", str(c.grad_accum_steps), "--learning_rate", f"{c.lr:g}",
                "--lr_scheduler_type", c.lr_sched, "--warmup_ratio", f"{c.warmup_ratio:g}",
                "--max_grad_norm", f"{c.max_grad_norm:g}", "--num_generations", str(c.num_generations),
                "--temperature", f"{c.temperature:g}", "--top_p", f"{c.top_p:g}",
                "--num_iterations", str(c.num_iterations), "--beta", f"{c.beta:g}", "--loss_scale", "default",
                "--gradient_checkpointing", b(c.gradient_checkpointing), "--save_steps", str(c.save_steps),
                "--save_total_limit", str(c.save_total_limit), "--logging_steps", str(c.logging_steps),
                "--dataset_num_proc", str(c.dataset_num_proc), "--dataloader_num_workers", str(c.dataloader_num_workers),
                "--log_completions", "true", "--log_entropy", b(c.log_entropy), "--dynamic_sample", b(c.dynamic_sample),
                "--max_resample_times", str(c.max_resample_times), "--report_to", c.report_to, "--run_name", c.run_name,
                "--seed", str(c.seed), "--output_dir", c.output_dir]
        if c.gpus and c.torch_dtype == "float32":      # float32 master weights, bf16 compute
            argv += ["--bf16", "true", "--fp16", "false"]
        if c.model_type:
            argv += ["--model_type", c.model_type]
        if c.deepspeed:
            argv += ["--deepspeed", c.deepspeed]
        if c.use_vllm:
            argv += ["--vllm_mode", c.vllm_mode, "--vllm_gpu_memory_utilization", f"{c.vllm_gpu_memory_utilization:g}",
                     "--vllm_max_model_len", str(c.vllm_max_model_len), "--sleep_level", str(c.sleep_level)]
        return [*argv, *extra]

    def environ(self) -> dict[str, str]:
        """The environment of the swift process: the WM endpoint, the env's guard switch, the GPU layout."""
        c = self.resolved()
        spec = get_env(c.env)
        env = {**os.environ, "WM_ENDPOINT": c.wm_endpoint, spec.guard_env: c.wm_guard, "PYTHONUNBUFFERED": "1",
               "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
        if c.wm_max_tokens is not None:
            env["WM_MAX_TOKENS"] = str(c.wm_max_tokens)
        env["WM_TEMPERATURE"] = f"{c.wm_temperature:g}"
        for name, value in (("WM_TOP_P", c.wm_top_p), ("WM_DIFFUSION_STEPS", c.wm_diffusion_steps)):
            env.pop(name, None)          # exactly the config's: an inherited value would not be recorded
            if value is not None:
                env[name] = str(value)
        env[REWARD_RULE_VAR] = c.reward
        env.pop(REAL_ENV_URL_VAR, None)
        env[ROLLOUT_ENV_VAR] = c.rollout_env
        if c.rollout_env == "real":
            env[REAL_ENV_URL_VAR] = c.real_env_url
            # Every episode of a generation round is in flight at once (swift plays them in lock-step).
            per_process = c.per_device_train_batch_size * c.grad_accum_steps
            env[REAL_SESSIONS_VAR] = str(max(REAL_SESSIONS, 2 * per_process, int(os.environ.get(REAL_SESSIONS_VAR) or 0)))
        if spec.replay_url_env:  # the reward's switch: exactly the config's (empty: off)
            env.pop(spec.replay_url_env, None)
            if c.env_url:
                env[spec.replay_url_env] = c.env_url
        if c.sim_cache:
            env[CACHE_DIR_ENV] = c.sim_cache
        apply_gpu_layout(env, c.num_gpus, c.master_port)
        return env


def low_precision_weights(config: GRPOConfig) -> bool:
    """True when the optimizer would update 16-bit weights with no float32 master copy (no DeepSpeed): a full
    fine-tune at an RL learning rate then loses most of its updates to rounding."""
    c = config.resolved()
    return c.torch_dtype in ("bfloat16", "float16") and not c.deepspeed


def prepare_rows(config: GRPOConfig) -> None:
    """The prepass: every row of ``DATA`` that lacks a simulator start state gets one in the cache, built from
    the real env (once; a tqdm bar), so no trainer process bakes one. DataError naming the row when impossible."""
    c = config.resolved()
    spec = get_env(c.env)
    if not spec.builds_sim_tasks:
        return
    cache = SimTaskCache(spec, c.sim_cache or None, workers=c.sim_workers)
    rows = complete_file(cache, c.data)
    if cache.stats.built or cache.stats.cached:
        print(f"{c.launcher or 'textwm.rl.launch'}: {len(rows)} rows, {cache.stats.built + cache.stats.cached} "
              f"start states completed ({cache.stats.built} built from the real env, {cache.stats.cached} cached) "
              f"in {cache.env_dir}", file=sys.stderr)


#: The resolved config of a run, beside swift's ``v<N>-<timestamp>/`` folders.
CONFIG_RECORD = "textwm_grpo_config.json"


def record_config(config: GRPOConfig) -> Path:
    """Write the resolved config (the world model's sampling included) to ``<output_dir>/`` :data:`CONFIG_RECORD`."""

    c = config.resolved()
    path = Path(c.output_dir) / CONFIG_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, dataclasses.asdict(c))
    return path


def run(config: GRPOConfig, extra: list[str] = (), *, stdout=None) -> int:
    """Run swift with ``config`` (announcing the CPU fallback) after the rows' prepass; its exit status."""
    c = config.resolved()
    name = c.launcher or "textwm.rl.launch"
    if c.num_gpus == 0:
        warn_no_gpu(name, f"CPU run in {c.torch_dtype} without vLLM")
    if low_precision_weights(c):
        print(f"{name}: warning: {c.torch_dtype} weights without DeepSpeed: the optimizer steps the {c.torch_dtype} "
              f"weights themselves, and a step smaller than ~1/256 of a weight rounds to nothing (at lr {c.lr:g} "
              "most do: the agent barely moves). Leave TORCH_DTYPE unset (float32 master weights, bf16 compute) or "
              "set DEEPSPEED", file=sys.stderr)
    try:
        prepare_rows(c)
    except DataError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    reward = (f"the real env at {c.real_env_url} (rollouts there)" if c.rollout_env == "real"
              else f"replays in {c.env_url}" if c.env_url else "the simulated trajectory")
    record_config(c)
    where = (f"the real env at {c.real_env_url}" if c.rollout_env == "real"
             else f"WM {c.wm_endpoint} (guard {c.wm_guard}, temperature {c.wm_temperature:g})")
    print(f"{name}: {c.model_path} on {c.data}, rollouts in {where} -> {c.output_dir}; "
          f"{c.num_gpus} GPU(s), vLLM {c.use_vllm}, {c.tasks_per_optimizer_step()} task(s) x {c.num_generations} "
          f"generations x {c.max_turns} turns a step, dynamic sampling {c.dynamic_sample}; "
          f"reward from {reward}", file=sys.stderr)
    return subprocess.run(config.argv(list(extra)), env=config.environ(), stdout=stdout,
                          stderr=subprocess.STDOUT if stdout is not None else None, check=False).returncode


def main(argv: list[str] | None = None, *, prog: str = "python -m textwm.rl.launch") -> int:
    """``python -m textwm.rl.launch --env NAME [flags] [-- swift arguments]``."""
    return launcher_main(GRPOConfig, run, argv, prog)


if __name__ == "__main__":
    raise SystemExit(main())
