"""Method interface: :class:`Method`, the base class of every method: its class flags and
the five groups of hooks it joins (:mod:`fedbench.methods.hooks`: planning, local
training, aggregation and traffic, evaluation, model and state), plus, re-exported from
:mod:`fedbench.methods.plans`, what the hooks exchange with the runner: the config, plans,
phases, updates, traffic, the global state and the context. Local training is one shared
loop (:mod:`fedbench.runners.executors.step`) that calls the hooks; aggregation rules are
pure functions (:mod:`fedbench.methods.aggregation`).

Methods never know which runner runs them. Cross-round state (FIM scores, momentum
buffers) lives in :class:`MethodState` (``tensors`` + a JSON-serialisable ``extra``), never
in module globals.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from fedbench.methods.client_api import ClientAPI, MemoryAPI
from fedbench.methods.hooks import Evaluation, Exchange, LocalTraining, ModelAndState, Planning
from fedbench.methods.plans import (EXTRA_PREFIX, LORA_FACTORS, ClientPlan, ClientProfile, ClientUpdate, LocalPhase, MethodConfig,
                                    MethodContext, MethodState, ServerAPI, Traffic, extra_module, tensor_bytes)


class Method(Planning, LocalTraining, Exchange, Evaluation, ModelAndState):
    """Base class. Subclasses set ``config_cls`` and override the hooks they change.

    The defaults implement FedAvg over whatever each client trains: send everything the
    client's forward needs, upload what it trained, average each tensor with example
    weights over the clients that uploaded it; tensors nobody trained keep their value.
    Every hook and flag the runner reads is declared with a default (engines never probe a
    method for attributes or look at its key): the flags here, the hooks in five groups
    (:mod:`fedbench.methods.hooks`), so a new method reads the group it changes. All of
    them, one line each:

    Class flags
      ``config_cls``           the frozen config dataclass (a ``MethodConfig``)
      ``task_kinds``           task kinds it supports
      ``evaluation``           "global": the global model on the test split; "local": each client's own
      ``requires_full_tier``   trains only clients whose budget covers every layer
      ``needs_archs``          architectures the task must offer (``Task.archs``)
      ``needs_parts``          the task's model must declare its parts (``ModelBundle.parts``)
      ``communicates``         False: exchanges nothing (local training only)
      ``family``               the section of the methods document it belongs to (plots draw a family together)
      ``STEP_HOOKS``           the local-training hooks that make a step a method's own (``plain_step``)
      ``step_overrides``       (classmethod) the hooks of ``STEP_HOOKS`` it overrides
      ``plain_step``           (classmethod) none overridden: its step is the task's own (executors may pack it)
      ``version``              its rule's version, recorded in ``run.method_version`` (bump on a rule change)
    Planning (:class:`~fedbench.methods.hooks.Planning`)
      ``resolve_config``       (classmethod) config defaults that depend on the task kind
      ``proxy_size_for``       (classmethod) held-out examples the server uses as its proxy set
      ``check_tiers``          refuse a federation in which it would train nobody
      ``client_arch``          the task architecture of a client's model
      ``plan``                 a :class:`ClientPlan` per sampled client this round (required)
      ``client_select``        the plan a client trains, chosen on the client from its own data
    Local training (:class:`~fedbench.methods.hooks.LocalTraining`)
      ``local_phases``         the phases, what each trains, its epochs and lr factor
      ``client_loss``          the loss of a phase (default: the task's loss + ``local_loss``)
      ``local_loss``           an extra loss term
      ``hidden_blocks``        blocks whose outputs ``client_loss`` / ``eval_logits`` read
      ``client_statistics``    non-parameter tensors uploaded after training
      ``quantised_activations`` blocks whose saved activations a client stores quantised, and the bits
      ``trained_factor``       the one LoRA factor (A or B) clients train in a round; None = both
    Aggregation and traffic (:class:`~fedbench.methods.hooks.Exchange`)
      ``client_payload``       the tensors sent down
      ``model_keys``           the tensors a client's forward uses (payload + private state)
      ``upload_keys``          the tensors sent up: what it trained
      ``traffic``              bytes down and up of a client-round, and other down counts
      ``upload_budget``        the most bytes a client may send up; the round loop refuses more
      ``aggregate``            the new global state from the clients' updates
    Evaluation (:class:`~fedbench.methods.hooks.Evaluation`)
      ``eval_blocks``          blocks of the evaluated global model
      ``eval_tensors``         the tensors loaded into the evaluated model
      ``eval_logits``          named logits of the evaluated model (classification)
    Model and state (:class:`~fedbench.methods.hooks.ModelAndState`)
      ``extra_modules``        trainable modules added to every model (early exits, shared models)
      ``patch_model``          (classmethod) changes to every model built, after its extra modules (RAVAN's cores)
      ``layout``               structural facts recorded in ``run.method_layout``
      ``base_weights_needed``  frozen base tensors the initial state must hold
      ``init_state``           the global state from the initial model's tensors
      ``private_keys``         tensors that stay on the client between rounds
    """

    config_cls: type[MethodConfig] = MethodConfig
    task_kinds: tuple[str, ...] = ("classification", "generation")
    #: "local" = every client's own model (private state + the global part) on its own local
    #: test split (``run.local_split``), averaged over clients (personalised FL)
    evaluation: ClassVar[Literal["global", "local"]] = "global"
    #: the default ``check_tiers`` refuses a federation without such a client (``exclusive``)
    requires_full_tier: ClassVar[bool] = False
    #: empty = any task of a supported kind
    needs_archs: ClassVar[tuple[str, ...]] = ()
    #: True: it splits the model by its declared parts (the FedLoRA family), so the task's
    #: model must declare them (``ModelBundle.parts``, with their widths)
    needs_parts: ClassVar[bool] = False
    #: False (a lower reference): its payloads and uploads are empty by design
    communicates: ClassVar[bool] = True
    #: its family, a section of the methods document (``leaderboard.families`` orders them;
    #: plots draw a crowded section as small multiples, one per family)
    family: ClassVar[str] = "other"
    #: the local-training hooks that change what one step computes (its loss or what is
    #: uploaded from the trained model); a method overriding any of them has a step of its
    #: own (``plain_step`` False), which executors run client by client, never packed. A new
    #: hook of that kind is added here, and every executor follows.
    STEP_HOOKS: ClassVar[tuple[str, ...]] = ("client_loss", "local_loss", "client_statistics", "patch_model",
                                              "quantised_activations")
    #: bump when a change gives its runs other results: recorded (run.method_version), in the run id from 2 on
    version: ClassVar[int] = 1

    def __init__(self, config: MethodConfig, ctx: MethodContext):
        self.config = config
        self.ctx = ctx

    @classmethod
    def step_overrides(cls) -> list[str]:
        """The hooks of ``STEP_HOOKS`` that ``cls`` (or a class between it and ``Method``) defines."""
        below = cls.__mro__[:cls.__mro__.index(Method)]
        return [h for h in Method.STEP_HOOKS if any(h in vars(k) for k in below)]

    @classmethod
    def plain_step(cls) -> bool:
        """Whether a client's step is the task's own supervised step: no hook of
        ``STEP_HOOKS`` overridden (derived from the class, never from its key)."""
        return not cls.step_overrides()


__all__ = ["EXTRA_PREFIX", "LORA_FACTORS", "ClientAPI", "ClientPlan", "ClientProfile", "ClientUpdate", "LocalPhase", "MemoryAPI",
           "Method", "MethodConfig", "MethodContext", "MethodState", "ServerAPI", "Traffic", "extra_module",
           "tensor_bytes"]
