"""A training run resolved once: its settings placed, its topology and its workload.

What the user asked is a :class:`~cluster.training.config.TrainConfig` (text and
numbers). :func:`plan_for` turns it into a :class:`TrainPlan`: the topology loaded once,
the replicas placed on its servers or racks (:func:`placed`), the workload built or read
once, and the settings checked against both. Everything that prices, checks or runs a
step takes the plan, so none of them loads a topology or parses a workload again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from cluster.errors import SettingError
from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.expert_parallel.expert_share import expert_rank_workload
from cluster.training.kinds import ModelKind, Split
from cluster.training.placement import replica_ipus, server_ipus, topology_for
from cluster.training.tensor_parallel.split import rank_workload
from cluster.training.workloads import (
    Workload,
    builtin_workload_of,
    mlp_workload,
    workload,
)

WORKLOAD_SETTINGS = frozenset({"model", "sequence_length", "gradient_dtype"})
"""The settings a workload's layers follow (the MLP's also follow its widths)."""


@dataclass(frozen=True)
class TrainPlan:
    """A run as it goes: ``config`` placed on ``topology`` (servers or racks, replicas on
    each, :attr:`chains`), the ``workload`` it prices, which settings the user ``given``
    (recorded once by the command that asked: fields, and its own options by name) and
    which were ``chosen`` for it rather than given (:func:`cluster.training.fit.resolve`);
    the rest are defaults (:mod:`cluster.training.reports.settings` says which and why)."""

    config: TrainConfig
    topology: Topology
    workload: Workload
    fixed: bool = False  # the workload was given (an imported module), not built here
    chosen: frozenset[str] = frozenset()  # settings left out that fit's resolve chose
    given: frozenset[str] = frozenset()  # settings the user gave, by field

    @cached_property
    def chains(self) -> np.ndarray:
        """The placed replicas: each row one replica's IPUs in stage order
        (:func:`~cluster.training.placement.replica_ipus`)."""
        return replica_ipus(self.config, self.topology).reshape(
            self.config.replicas, self.config.ipus_per_replica)

    @cached_property
    def rank_workload(self) -> Workload:
        """What each IPU of a replica's tensor group holds and computes: the workload's
        layers split over the group (:mod:`.tensor_parallel.split`); the workload itself
        without tensor parallelism; with expert parallelism, each MoE layer's share of
        its experts (:mod:`.expert_parallel.expert_share`)."""
        return expert_rank_workload(rank_workload(self.workload, self.config.tensor_parallel),
                                    self.config.expert_parallel)

    @cached_property
    def priced(self) -> dict[str, object]:
        """What :func:`~cluster.training.per_plan.per_plan` functions worked out for this
        plan, by function: each once a run (a plan is frozen)."""
        return {}

    @property
    def kind(self) -> ModelKind:
        """The trainer's MLP or a workload."""
        return self.config.kind

    @property
    def split(self) -> Split:
        """How a replica's layers spread over its IPUs."""
        return Split(self.config.split)

    @property
    def server_size(self) -> int:
        """IPUs of each server (DSS 8440) or rack (POD) of the topology."""
        return int(server_ipus(self.topology)[0].size)

    def changed(self, **settings: Any) -> TrainPlan:
        """This plan with ``settings`` changed, on the same topology (not placed again
        nor checked: :func:`check` says whether it can run)."""
        return self.with_config(replace(self.config, **settings))

    def with_config(self, config: TrainConfig) -> TrainPlan:
        """``config`` on this plan's topology, with this plan's workload unless it follows
        a setting ``config`` changes (the MLP's widths follow its IPUs per replica), then
        built anew. Not checked."""
        return replace(self, config=config, workload=self._workload_for(config))

    def replanned(self, **settings: Any) -> TrainPlan:
        """:meth:`replanned_as` this plan's settings with ``settings`` changed."""
        return self.replanned_as(replace(self.config, **settings))

    def replanned_as(self, config: TrainConfig) -> TrainPlan:
        """:func:`plan_for` of ``config``, a variation of this plan's settings (placed and
        checked again; the topology loaded again only if ``config`` names another or other
        servers, the workload rebuilt only where it follows a changed setting)."""
        same = (config.topology, config.servers) == (self.config.topology, self.config.servers)
        return plan_for(config, self.topology if same else None, self._workload_for(config),
                        fixed=self.fixed)

    def _workload_for(self, config: TrainConfig) -> Workload:
        """This plan's workload if it does not follow what ``config`` changes, else one
        built anew."""
        same = config.kind is ModelKind.WORKLOAD and all(
            getattr(config, name) == getattr(self.config, name) for name in WORKLOAD_SETTINGS)
        return self.workload if self.fixed or same else build_workload(config)


def build_workload(config: TrainConfig) -> Workload:
    """What the cost model prices: the MLP of ``config.spec``, or ``config.model`` (a
    built-in, from its registry entry looked up where the model was named, or a workload
    file, read here) with the sequence length and gradient dtype asked for."""
    if config.kind is ModelKind.MLP:
        if config.sequence_length is not None:
            raise SettingError("sequence_length", "{sequence_length} applies to a language "
                               "model (BERT, GPT, Llama, MoE), not to the MLP")
        built = mlp_workload(config.spec)
        return built if config.gradient_dtype is None else replace(
            built, gradient_dtype=config.gradient_dtype)
    options: dict[str, object] = {}
    if config.sequence_length is not None:
        options["sequence_length"] = config.sequence_length
    if config.gradient_dtype is not None:
        options["gradient_dtype"] = config.gradient_dtype
    model = config.model
    if model.builtin is not None:
        return builtin_workload_of(model.builtin, options)
    return workload(model.text, **options)


def placed(config: TrainConfig, topology: Topology) -> TrainConfig:
    """``config`` with the topology's servers (or racks) when it names a topology, and
    as many replicas on each as its IPUs hold when ``replicas_per_server`` is 0."""
    servers = server_ipus(topology)
    if config.topology:
        config = replace(config, servers=len(servers))
    if config.replicas_per_server == 0 and config.ipus_per_replica > 0:  # as many as fit
        config = replace(config, replicas_per_server=max(
            1, servers[0].size // config.ipus_per_replica))
    return config


def plan_for(config: TrainConfig, topology: Topology | None = None,
             given: Workload | None = None, fixed: bool = False) -> TrainPlan:
    """``config`` resolved: on ``topology`` (default: the one it names, loaded here),
    placed, its workload ``given`` or built, and checked (a UserError naming the setting
    to change, in the order :meth:`TrainConfig.check_settings` and
    :meth:`TrainConfig.check_workload` check). ``fixed``: ``given`` is the run's
    whatever its settings (an imported module's), not one built from them."""
    if topology is None:
        if config.servers < 1 and not config.topology:
            raise SettingError("servers", "{servers} must be 1 or more")
        topology = topology_for(config)
    config = placed(config, topology)
    config.check_settings(int(server_ipus(topology)[0].size))
    plan = TrainPlan(config, topology, build_workload(config) if given is None else given,
                     fixed)
    config.check_workload(plan.workload)
    return plan


def check(plan: TrainPlan) -> None:
    """A UserError naming the setting to change if ``plan`` cannot run as it stands."""
    plan.config.check_settings(plan.server_size)
    plan.config.check_workload(plan.workload)
