"""A training run's settings, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import SettingError
from cluster.training.decoder.real_settings import check_real_decoder
from cluster.training.defaults import DEFAULTS
from cluster.training.expert_parallel.expert_groups import check_expert_parallel
from cluster.training.kinds import MLP_NAME, ModelKind, Split
from cluster.training.model_ref import ModelRef, model_ref
from cluster.training.numpy_mlp import MLPSpec
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.pass_schedule import TooFewMicroBatches
from cluster.training.pipeline.schedules import (
    DEFAULT,
    check_schedule_shape,
    schedule_names,
)
from cluster.training.pipeline.stages import stage_layers
from cluster.training.tensor_parallel.layout import OFF, TensorParallel
from cluster.training.tensor_parallel.split import check_tensor_split
from cluster.training.workloads import (
    DEFAULT_EFFICIENCIES,
    DType,
    Efficiencies,
    Workload,
)
from gcl.modes import Mode

IPUS_PER_SERVER = 16
IPUS_PER_REPLICA = (1, 2, 4, 8, 16, 32, 64)  # an aligned power-of-two block of a rack
DEFAULT_WIDTH = 128  # of each hidden layer, unless ``hidden`` says otherwise
MAX_STEPS = 1_000_000  # a run's steps: each keeps its figures
MAX_ACCUMULATION = 1 << 16  # micro-batches a step: its schedule holds every one's passes
MAX_MICRO_BATCH = 1 << 20  # samples a micro-batch: far past any IPU's memory, and a bound
# that keeps the memory arithmetic in floating point
OPTIMIZER_STATE = tuple(OptimizerState)  # where the optimiser's values live, nearest first
SPLITS = tuple(Split)  # how a replica's layers spread over its IPUs
MLP = model_ref(MLP_NAME)  # the trainer's own model: the only one real mode trains
DEFAULT_MODEL = model_ref(DEFAULTS.model)


@dataclass(frozen=True)
class TrainConfig:
    """A training run; every default is :data:`~cluster.training.defaults.DEFAULTS`'s.
    ``micro_batch`` is samples per replica per micro-batch; a step takes
    ``replicas x accumulation x micro_batch`` samples. A replica spans
    ``ipus_per_replica`` IPUs (its Graph Compile Domain): one stage of its pipeline on
    each, with ``accumulation`` micro-batches in flight."""

    servers: int = DEFAULTS.servers
    replicas_per_server: int = 16  # 0: as many as the server's (or rack's) IPUs hold
    ipus_per_replica: int = DEFAULTS.ipus_per_replica[0]
    micro_batch: int = DEFAULTS.micro_batches[0]
    accumulation: int = DEFAULTS.accumulation
    steps: int = DEFAULTS.steps
    lr: float = DEFAULTS.lr
    momentum: float = DEFAULTS.momentum
    seed: int = DEFAULTS.seed
    algorithm: str = DEFAULTS.algorithm
    input_size: int = 64
    hidden: tuple[int, ...] | None = None  # default: DEFAULT_WIDTH, once per stage boundary
    classes: int = 10
    samples: int = 16384
    mode: Mode = Mode.REAL  # a plain "real" or "phantom" is taken too
    check: bool = False
    topology: str | None = None  # a preset or YAML file; default: dss8440 x servers
    pipeline_schedule: str = DEFAULTS.pipeline_schedule
    recompute: bool | None = None  # None: as the model's published recipe (see recomputes)
    model: ModelRef = DEFAULT_MODEL  # a built-in workload or a workload file (phantom
    # mode), resolved once (a plain name is taken too)
    sequence_length: int | None = None  # BERT and GPT-2: tokens per sample
    gradient_dtype: DType | None = None  # default: the workload's (a plain name is taken too)
    optimizer_state: OptimizerState = DEFAULTS.optimizer_state  # a plain name is taken too
    split: Split = DEFAULTS.split  # or "shard": the MLP's widest layer by columns over the IPUs
    efficiency_scale: float = DEFAULTS.efficiency_scale  # each kind's efficiency times this
    layers_per_ipu: tuple[int, ...] | None = None  # a recipe's stages; None: balanced
    final_stage_on_first_ipu: bool = False  # one stage more, back on the replica's IPU 0
    tensor_parallel: TensorParallel = OFF  # each layer split over the replica's IPUs
    expert_parallel: int = 1  # each MoE layer's experts over this many replicas
    phased: bool = False  # layers' weights streamed in phase by phase (:mod:`.phased`)

    def __post_init__(self) -> None:
        """A plain model name becomes its :class:`ModelRef` (read once here), a plain
        optimiser-state or split name its :class:`OptimizerState` or :class:`Split` (an
        unknown one is left for :meth:`validate` to refuse), a plain dtype name its
        :class:`DType`."""
        if isinstance(self.model, str):
            object.__setattr__(self, "model", model_ref(self.model))
        if self.optimizer_state in OPTIMIZER_STATE:
            object.__setattr__(self, "optimizer_state", OptimizerState(self.optimizer_state))
        if self.split in SPLITS:
            object.__setattr__(self, "split", Split(self.split))
        if self.gradient_dtype in tuple(DType):
            object.__setattr__(self, "gradient_dtype", DType(self.gradient_dtype))

    def check_settings(self, server_size: int | None = None) -> None:
        """A SettingError naming the setting to change if the settings do not go together;
        a server (or rack) of ``server_size`` IPUs bounds the replicas per server. The
        checks that need the workload are :meth:`check_workload`'s."""
        self._check_tensor_parallel(server_size or IPUS_PER_SERVER)
        self._check_placement(server_size or IPUS_PER_SERVER)
        self._check_counts()
        self._check_modes()
        self._check_split()
        self._check_final_stage()
        self._check_phased()
        check_real_decoder(self)

    def check_workload(self, built: Workload) -> None:
        """A SettingError naming the setting to change if this run's workload (``built``)
        cannot go on its stages as asked, has nothing to train, or its schedule or
        efficiencies do not fit it."""
        self._check_stages(built)
        self._check_workload(built)
        if self.kind is not ModelKind.MLP:
            check_tensor_split(built, self.tensor_parallel)
        check_expert_parallel(built, self.expert_parallel, self.replicas_per_server)
        self._check_efficiency()
        self._check_schedule()

    def _check_placement(self, server_ipus: int) -> None:
        """A SettingError unless whole replicas fit a server of ``server_ipus`` IPUs."""
        if self.servers < 1:
            raise SettingError("servers", "{servers} must be 1 or more")
        if self.ipus_per_replica not in IPUS_PER_REPLICA:
            raise SettingError("ipus_per_replica", "{ipus_per_replica} (or {gcd}) is one of "
                               "{choices}, not {given}",
                               choices=", ".join(map(str, IPUS_PER_REPLICA)),
                               given=self.ipus_per_replica)
        per_server = server_ipus // self.ipus_per_replica
        if per_server < 1:
            raise SettingError("ipus_per_replica", "a replica of {given} IPUs does not fit a "
                               "server of {server}: use fewer {ipus_per_replica}",
                               given=self.ipus_per_replica, server=server_ipus)
        if not 1 <= self.replicas_per_server <= per_server:
            raise SettingError("replicas_per_server", "{replicas_per_server} runs from 1 to "
                               "{most} with {ipus_per_replica} {given} on this topology",
                               most=per_server, given=self.ipus_per_replica)

    def _check_counts(self) -> None:
        """A SettingError unless every count is positive and the optimiser's numbers in range."""
        for name in ("micro_batch", "accumulation", "steps", "input_size", "classes",
                     "samples"):
            if getattr(self, name) < 1:
                also = " ({batch_size})" if name == "micro_batch" else ""
                raise SettingError(name, f"{{{name}}}{also} must be 1 or more")
        if self.steps > MAX_STEPS:
            raise SettingError("steps", "{steps} runs to {most:,} (a run keeps each step's "
                               "figures), not {given}", most=MAX_STEPS, given=self.steps)
        if self.micro_batch > MAX_MICRO_BATCH:
            raise SettingError("micro_batch", "{micro_batch} runs to {most:,} samples (a "
                               "replica's micro-batch), no more", most=MAX_MICRO_BATCH)
        if self.accumulation > MAX_ACCUMULATION:
            raise SettingError("accumulation", "{accumulation} runs to {most} (a step's "
                               "schedule holds every micro-batch's passes), not {given}",
                               most=MAX_ACCUMULATION, given=self.accumulation)
        if not self.lr > 0 or not 0 <= self.momentum < 1:
            raise SettingError("lr" if not self.lr > 0 else "momentum",
                               "the learning rate must be positive and momentum in [0, 1)")

    def _check_modes(self) -> None:
        """A SettingError if the mode, dtype and optimiser state do not go together."""
        if self.mode not in tuple(Mode):
            raise SettingError("mode", "{mode} is real or phantom")
        if (self.kind is not ModelKind.MLP and self.mode == Mode.REAL
                and self.model.decoder is None):
            raise SettingError("mode", "{model} {given} trains in phantom mode only (a "
                               "workload has counts, not weights): add {mode} phantom, or "
                               "train the MLP or gpt-tiny in real mode",
                               given=self.model.text[:60])
        if self.gradient_dtype not in (None, *tuple(DType)):
            raise SettingError("gradient_dtype", "{gradient_dtype} is {choices}",
                               choices=" or ".join(DType))
        if self.gradient_dtype == DType.FLOAT16 and self.mode == Mode.REAL:
            raise SettingError("gradient_dtype", "real mode trains in float32: "
                               "{gradient_dtype} float16 needs {mode} phantom")
        if self.optimizer_state not in OPTIMIZER_STATE:
            raise SettingError("optimizer_state", "{optimizer_state} is {choices}",
                               choices=" or ".join(OPTIMIZER_STATE))
        if self.check and self.mode != Mode.REAL:
            raise SettingError("check", "{check} compares real training with the reference: "
                               "use {mode} real")

    def _check_split(self) -> None:
        """A SettingError if a sharded layer is asked for what only pipelines do."""
        if self.split not in SPLITS:
            raise SettingError("split", "{split} is {choices}", choices=" or ".join(SPLITS))
        if self.splits_columns and self.kind is not ModelKind.MLP:
            raise SettingError("split", "{split} shard splits the MLP's widest layer: use it "
                               "without {model}, or pipeline the workload ({split} pipeline)")
        if self.splits_columns and (self.recompute or self.pipeline_schedule != DEFAULT):
            raise SettingError("split", "{recompute} and {pipeline_schedule} apply to pipeline "
                               "stages, not to a sharded layer: leave them out with {split} "
                               "shard")

    def _check_workload(self, built: Workload) -> None:
        """A SettingError if the workload (``built``) has no weights: no gradient to reduce."""
        if self.kind is not ModelKind.MLP and built.parameter_count == 0:
            raise SettingError("model", "{model} {given}: the workload has no parameters, so "
                               "there is nothing to train: give a layer parameters",
                               given=self.model.text[:60])

    def _check_efficiency(self) -> None:
        """A SettingError if --efficiency-scale has nothing to scale or scales past the peak."""
        if self.efficiency_scale != 1.0:
            if self.kind is ModelKind.MLP:
                raise SettingError("efficiency_scale", "{efficiency_scale} scales a workload's "
                                   "efficiencies: give {model}, or leave it out for the MLP "
                                   "(priced at peak)")
            _ = self.efficiencies  # a UserError if it puts a kind past the peak

    def _check_schedule(self) -> None:
        """A SettingError unless the schedule is known and fits the stages and micro-batches."""
        if self.pipeline_schedule not in schedule_names():
            raise SettingError("pipeline_schedule", "unknown {pipeline_schedule} {given!r}: "
                               "choose {choices}", given=self.pipeline_schedule[:40],
                               choices=" or ".join(schedule_names()))
        if self.splits_columns:
            return
        try:
            check_schedule_shape(self.pipeline_schedule, self.pipeline_stages,
                                 self.accumulation)
        except TooFewMicroBatches as error:
            if not self.final_stage_on_first_ipu:
                raise
            raise TooFewMicroBatches(
                f"{error}; the {self.pipeline_stages} stages are the {self.ipus_per_replica} "
                "IPUs' and the final stage back on the first IPU", error.needed) from None

    def _check_final_stage(self) -> None:
        """A SettingError unless the last stage can go back on the replica's first IPU."""
        if self.final_stage_on_first_ipu and (self.splits_columns or self.ipus_per_replica < 2
                                              or self.kind is ModelKind.MLP):
            raise SettingError("final_stage_on_first_ipu", "{final_stage_on_first_ipu} runs a "
                               "workload's last pipeline stage on the replica's first IPU: "
                               "give {model} and {ipus_per_replica} 2 or more, and leave "
                               "out {split} shard")

    def _check_phased(self) -> None:
        """A SettingError unless a phased replica is a workload's one stage (of one IPU or
        one tensor group) with its optimiser state in Streaming Memory."""
        if not self.phased:
            return
        if self.kind is ModelKind.MLP or self.splits_columns or self.pipeline_stages > 1:
            raise SettingError("phased", "{phased} streams one stage's layers phase by phase: "
                               "give {model} a workload, one IPU or one tensor group a "
                               "replica, and no {final_stage_on_first_ipu} or {split} shard")
        if not OptimizerState(self.optimizer_state).offchip:
            raise SettingError("phased", "{phased} keeps the optimiser state in Streaming "
                               "Memory: add {optimizer_state} streaming (or sharded-streaming)")

    def _check_tensor_parallel(self, server_ipus: int) -> None:
        """A SettingError unless a tensor-parallel replica is pipeline stages of whole
        tensor groups of a workload's (``ipus_per_replica`` = stages x the group's IPUs;
        the MLP's column split is not in the emulator) and a server of ``server_ipus``
        IPUs (its IPU-Link domain) holds a tensor group whole."""
        layout = self.tensor_parallel
        if not layout.on:
            return
        if server_ipus % layout.size:
            raise SettingError("tensor_parallel", "{tensor_parallel} {given}: a tensor group "
                               "of {size} IPUs does not divide a server or rack of {server}: "
                               "use a T1 x T2 that does", given=str(layout), size=layout.size,
                               server=server_ipus)
        if self.kind is ModelKind.MLP and (self.mode != Mode.REAL or layout.two_d
                                           or self.ipus_per_replica != layout.size
                                           or max(self.spec.hidden, default=0) < layout.size):
            raise SettingError("tensor_parallel", "{tensor_parallel} splits a transformer's "
                               "layers, or in {mode} real the MLP's widest hidden layer (1-D, "
                               "at least T units): give {model} a transformer (gpt3-2.7b, "
                               "bert-large, ...), or use {mode} real, {tensor_parallel} T and "
                               "{ipus_per_replica} T for the MLP")
        if self.splits_columns or self.final_stage_on_first_ipu:
            raise SettingError("tensor_parallel", "{tensor_parallel} with {split} shard or "
                               "{final_stage_on_first_ipu} is not in the emulator yet: leave "
                               "those out")
        if self.ipus_per_replica % layout.size:
            raise SettingError("tensor_parallel", "{tensor_parallel} {given} makes a replica "
                               "pipeline stages of {size} IPUs each ({ipus_per_replica} "
                               "{given_ipus}): give {ipus_per_replica} {size} (one stage) or "
                               "a multiple of it (stages x {size})",
                               given=str(layout), size=layout.size,
                               given_ipus=self.ipus_per_replica)

    def _check_stages(self, built: Workload) -> None:
        """A SettingError naming the setting if the layers of ``built`` cannot go on the
        pipeline's stages as asked (``--layers-per-ipu``)."""
        layers = len(built.layers)
        if self.layers_per_ipu is not None:
            stage_layers([0] * layers, self.pipeline_stages, self.layers_per_ipu)
        if layers < self.pipeline_stages and not self.splits_columns:
            raise SettingError("ipus_per_replica", "the model has {layers} layers: {stages} "
                               "pipeline stages need at least {stages} (add hidden layers "
                               "with {hidden}, or use fewer {ipus_per_replica})",
                               layers=layers, stages=self.pipeline_stages)
        if self.layers_per_ipu is not None and (self.splits_columns
                                                or self.kind is ModelKind.MLP):
            raise SettingError("layers_per_ipu", "{layers_per_ipu} places a workload's layers "
                               "on pipeline stages: give {model}, and leave out {split} "
                               "shard")

    @property
    def kind(self) -> ModelKind:
        """The trainer's MLP or a workload (``model``'s, told apart once where the model
        was named: :func:`~cluster.training.model_ref.model_ref`)."""
        return self.model.kind

    @property
    def gcd(self) -> int:
        """IPUs per replica, as the white paper's Graph Compile Domain."""
        return self.ipus_per_replica

    @property
    def pipeline_stages(self) -> int:
        """Pipeline stages of a replica: one per IPU (per tensor group with
        ``tensor_parallel``), and one more with ``final_stage_on_first_ipu``."""
        return (max(1, self.ipus_per_replica // self.tensor_parallel.size)
                + (1 if self.final_stage_on_first_ipu else 0))

    @property
    def stage_ipus(self) -> tuple[int, ...]:
        """Which of the replica's IPUs (0 to ``ipus_per_replica - 1``, along its chain)
        runs each pipeline stage (with ``tensor_parallel``, the first IPU of its tensor
        group, which every IPU of the group runs alike): stage ``s`` on IPU ``s``, and with
        ``final_stage_on_first_ipu`` the last stage back on IPU 0, as Graphcore's BERT
        recipes place the heads and the loss beside the embeddings whose word table the
        masked-LM decoder shares (PopART: the embeddings are pipeline stage 0 and the
        masked-LM stage the last, both on virtual graph 0; ``bert_model.py`` of the
        MLPerf Training v1.0 and v1.1 submissions)."""
        ipus = tuple(range(0, self.ipus_per_replica, self.tensor_parallel.size))
        return ipus + ((0,) if self.final_stage_on_first_ipu else ())

    @property
    def replicas(self) -> int:
        """Model replicas in all: servers times replicas per server."""
        return self.servers * self.replicas_per_server

    @property
    def global_batch(self) -> int:
        """Samples per step, over every replica and micro-batch."""
        return self.replicas * self.accumulation * self.micro_batch

    @property
    def hidden_widths(self) -> tuple[int, ...]:
        """Hidden layer widths: ``hidden``, or one layer of DEFAULT_WIDTH per stage
        boundary (at least one), so that every stage has a layer; one when sharding."""
        if self.hidden is not None:
            return tuple(self.hidden)
        if self.split is Split.SHARD:
            return (DEFAULT_WIDTH,)
        return (DEFAULT_WIDTH,) * max(1, self.ipus_per_replica - 1)

    @property
    def optimizer_shards(self) -> int:
        """How many replicas share each optimiser value: with ``sharded`` or
        ``sharded-streaming`` (PopART's replicated tensor sharding) the replicas of a
        server or rack each keep and update 1/R of it; otherwise 1. On one server or rack
        the gradient allreduce is unchanged (a reduce-scatter of the gradients, then an
        all-gather of the updated weights: the same bytes); across several, PopART adds an
        allreduce of each shard between the racks (:mod:`.sharded_reduction`)."""
        return (self.replicas_per_server
                if OptimizerState(self.optimizer_state).over_replicas else 1)

    @property
    def optimizer_offchip(self) -> bool:
        """Whether the optimiser's values live in an IPU-M2000's Streaming Memory
        (``streaming``, ``sharded-streaming``), streamed in and out for each update."""
        return OptimizerState(self.optimizer_state).offchip

    @property
    def splits_columns(self) -> bool:
        """Whether a replica of several IPUs splits one layer by columns instead of
        pipelining (``--split shard``; not the optimiser state's sharding over replicas,
        :attr:`optimizer_shards`)."""
        return self.split is Split.SHARD and self.ipus_per_replica > 1

    @property
    def recomputes(self) -> bool:
        """Whether stages recompute their activations: ``recompute`` if given, else as
        the published IPU recipes of the built-in workloads do (Graphcore's ResNet-50,
        BERT and GPT-2 training recompute), and not for the MLP nor the decoders real mode
        trains (which keep their activations)."""
        if self.recompute is not None:
            return self.recompute
        return self.kind is not ModelKind.MLP and self.model.decoder is None

    @property
    def efficiencies(self) -> Efficiencies:
        """Fractions of peak: the published-throughput defaults for a workload, times
        ``efficiency_scale`` (``ipupod calibrate``); peak for the MLP, whose step is priced
        as it always was (its FLOPs at the fp32 peak)."""
        if self.kind is ModelKind.MLP:
            return Efficiencies.peak()
        return DEFAULT_EFFICIENCIES.scaled(self.efficiency_scale)

    @property
    def spec(self) -> MLPSpec:
        """The shape of the model every replica trains."""
        return MLPSpec(self.input_size, self.hidden_widths, self.classes)
