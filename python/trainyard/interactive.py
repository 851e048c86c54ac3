"""T5X's InteractiveModel, run by a coordinator's workers: an interactive
session (JobService.OpenSession/RunSession/CloseSession) on a checkpoint.

    with RemoteInteractiveModel(client, checkpoint=path, batch_size=8,
                                task_feature_lengths={"inputs": 16, "targets": 32},
                                output_dir=out) as model:
        model.train_step(examples)
        predictions, aux = model.predict_with_aux(examples)
        model.evaluate(examples, [exact_match_fn, "bleu"])
        model.save_checkpoint()

Each method is one session request of the same name (train_step is
TRAIN_STEP, predict_with_aux PREDICT, score SCORE, save_checkpoint
SAVE_CHECKPOINT). evaluate runs Python metric functions here, over the
predictions and scores the session returns, and built-in ones (named by a
str) on the worker. T5X methods without a session request (preprocessors,
batch iterators, the gin export) are not offered: docs/python.md lists them.

Not thread-safe: a session serves one request at a time.
"""
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from trainyard.client import Error, JobClient
from trainyard.proto import job_pb2, job_service_pb2

Example = Union[str, Mapping[str, str]]
MetricFn = Callable[..., Mapping[str, Any]]
Op = job_service_pb2.SessionRequest

# seqio's three forms, by the metric function's positional parameters.
_SCORE_FORM = ("targets", "scores")
_PREDICT_FORM = ("targets", "predictions")
_PREDICT_WITH_AUX_FORM = ("targets", "predictions", "aux_values")


def metric_fn_form(fn: MetricFn) -> Tuple[str, ...]:
    """The parameters a metric function takes, as seqio tells them apart: its
    positional parameters without defaults must be ("targets", "scores"),
    ("targets", "predictions") or ("targets", "predictions", "aux_values");
    ValueError naming the function otherwise."""
    params = tuple(name for name, p in inspect.signature(fn).parameters.items()
                   if p.default is inspect.Parameter.empty
                   and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    if params not in (_SCORE_FORM, _PREDICT_FORM, _PREDICT_WITH_AUX_FORM):
        raise ValueError(f"metric function {getattr(fn, '__name__', fn)!r}: positional arguments {params}; want "
                         "('targets', 'predictions'), ('targets', 'scores') or "
                         "('targets', 'predictions', 'aux_values')")
    return params


def _session_examples(examples: Sequence[Example], need_targets: bool, what: str) -> List[job_service_pb2.SessionExample]:
    out = []
    for i, e in enumerate(examples):
        if isinstance(e, str):
            e = {"input": e}
        if not isinstance(e, Mapping):
            raise TypeError(f"{what}: example {i} is a {type(e).__name__}; want a str or a dict with 'input' "
                            "(and 'target')")
        input_key = "input" if "input" in e else "inputs"
        target_key = "target" if "target" in e else "targets"
        if not isinstance(e.get(input_key), str):
            raise ValueError(f"{what}: example {i} needs a str 'input'")
        x = job_service_pb2.SessionExample(input=e[input_key])
        if target_key in e:
            if not isinstance(e[target_key], str):
                raise ValueError(f"{what}: example {i}: 'target' is not a str")
            x.target = e[target_key]
        elif need_targets:
            raise ValueError(f"{what}: example {i} needs a 'target'")
        out.append(x)
    if not out:
        raise ValueError(f"{what}: no examples")
    return out


class RemoteInteractiveModel:
    """An interactive session on a checkpoint, held by idle workers of a
    coordinator until close() (or idle_timeout_seconds without a request).

    client: a JobClient, or a coordinator address for one of this model's
    own (closed with it). checkpoint: a checkpoint directory the workers can
    read, or job_id: that job's newest checkpoint. batch_size and
    task_feature_lengths ({"inputs": N, "targets": M}) as T5X's; output_dir:
    where save_checkpoint writes (empty: no saving). num_workers: workers
    holding the model data-parallel. inference: how predict_with_aux and
    evaluate decode (an InferenceConfig or its dict: method, beam_size,
    alpha, temperature, top_k, top_p, seed, max_decode_length).
    wait_seconds: how long the coordinator waits for idle workers.
    timeout: seconds each request may take.

    Errors are trainyard.Error with the worker's status code (e.g.
    INVALID_ARGUMENT for fewer examples than batch_size in train_step).
    """

    def __init__(self, client: Union[JobClient, str], *, checkpoint: str = "", job_id: str = "",
                 batch_size: int = 32, task_feature_lengths: Optional[Mapping[str, int]] = None,
                 output_dir: str = "", num_workers: int = 1,
                 inference: Union[job_pb2.InferenceConfig, Mapping, None] = None,
                 idle_timeout_seconds: int = 300, wait_seconds: int = 10, timeout: float = 600.0) -> None:
        self._own_client = isinstance(client, str)
        self.client = JobClient(client) if isinstance(client, str) else client
        self.timeout = timeout
        self.batch_size = batch_size
        lengths = dict(task_feature_lengths or {"inputs": 64, "targets": 64})
        request = job_service_pb2.OpenSessionRequest(
            checkpoint=checkpoint, job_id=job_id, batch_size=batch_size,
            feature_lengths=job_pb2.FeatureLengths(inputs=lengths.get("inputs", 0), targets=lengths.get("targets", 0)),
            output_dir=output_dir, num_workers=num_workers, idle_timeout_seconds=idle_timeout_seconds,
            wait_seconds=wait_seconds)
        if isinstance(inference, Mapping):
            from google.protobuf import json_format
            json_format.ParseDict(inference, request.inference)
        elif inference is not None:
            request.inference.CopyFrom(inference)
        self.task_feature_lengths = lengths
        self.output_dir = output_dir
        self.session_id = ""
        try:
            opened = self.client.call("OpenSession", request, timeout=timeout)
        except BaseException:
            if self._own_client:
                self.client.close()
            raise
        self.session_id = opened.session_id
        self.worker_ids: List[str] = list(opened.worker_ids) or [opened.worker_id]
        self._step = opened.step

    @property
    def step(self) -> int:
        """The model's step: the checkpoint's, plus one per train_step."""
        return self._step

    def _run(self, op: int, examples: Sequence[job_service_pb2.SessionExample] = (),
             metric_fns: Sequence[str] = ()) -> job_service_pb2.SessionResponse:
        if not self.session_id:
            raise ValueError("the session is closed")
        request = job_service_pb2.SessionRequest(session_id=self.session_id, op=op, examples=list(examples),
                                                 metric_fns=list(metric_fns))
        response = self.client.call("RunSession", request, timeout=self.timeout)
        self._step = response.step
        return response

    def train_step(self, examples: Sequence[Example]) -> Dict[str, float]:
        """One training step on the first batch_size examples (each with a
        target; INVALID_ARGUMENT when fewer are given). Returns the step's
        train summary (loss, accuracy, learning rate, ...); T5X's returns
        nothing."""
        response = self._run(Op.TRAIN_STEP, _session_examples(examples, True, "train_step"))
        return dict(response.metrics)

    def predict_with_aux(self, examples: Sequence[Example]) -> Tuple[List[str], Dict[str, List[float]]]:
        """Decoded predictions, and their auxiliary values: {"scores": the
        log-likelihood of each prediction}."""
        response = self._run(Op.PREDICT, _session_examples(examples, False, "predict_with_aux"))
        return list(response.predictions), {"scores": list(response.scores)}

    def score(self, examples: Sequence[Example]) -> List[float]:
        """The log-likelihood of each example's target given its input."""
        return list(self._run(Op.SCORE, _session_examples(examples, True, "score")).scores)

    def evaluate(self, examples: Sequence[Example], metric_fns: Sequence[Union[MetricFn, str]]) -> Dict[str, Any]:
        """Metric functions over the examples (each with a target): Python
        callables of seqio's three forms (see metric_fn_form), each given the
        targets and the predictions (and aux values {"scores": ...}) or the
        targets' scores, each returning a dict of metric name to value; and
        built-in metric functions named by str (exact_match, bleu, ...),
        computed by the worker. Returns every function's metrics in one
        dict; ValueError when two functions return the same metric name."""
        if not metric_fns:
            raise ValueError("evaluate: metric_fns is empty")
        session_examples = _session_examples(examples, True, "evaluate")
        targets = [x.target for x in session_examples]
        builtin = [m for m in metric_fns if isinstance(m, str)]
        forms = [(fn, metric_fn_form(fn)) for fn in metric_fns if not isinstance(fn, str)]
        results: Dict[str, Any] = {}

        def merge(values: Mapping[str, Any], source: str) -> None:
            if not isinstance(values, Mapping):
                raise TypeError(f"evaluate: {source} returned a {type(values).__name__}; want a dict of metric "
                                "name to value")
            for name, value in values.items():
                if name in results:
                    raise ValueError(f"evaluate: metric {name!r} of {source} is also another function's")
                results[name] = value

        if builtin:
            merge(dict(self._run(Op.EVALUATE, session_examples, builtin).metrics), f"built-in {builtin}")
        predictions = aux = scores = None
        if any(form != _SCORE_FORM for _, form in forms):
            response = self._run(Op.PREDICT, session_examples)
            predictions, aux = list(response.predictions), {"scores": list(response.scores)}
        if any(form == _SCORE_FORM for _, form in forms):
            scores = list(self._run(Op.SCORE, session_examples).scores)
        for fn, form in forms:
            name = getattr(fn, "__name__", repr(fn))
            if form == _SCORE_FORM:
                merge(fn(targets, scores), name)
            elif form == _PREDICT_FORM:
                merge(fn(targets, predictions), name)
            else:
                merge(fn(targets, predictions, aux), name)
        return results

    def save_checkpoint(self) -> str:
        """Writes the model's checkpoint into output_dir (FAILED_PRECONDITION
        when the session has none) and returns its directory."""
        return self._run(Op.SAVE_CHECKPOINT).checkpoint

    def close(self) -> None:
        """Closes the session (its workers return to the pool); idempotent."""
        session_id, self.session_id = self.session_id, ""
        try:
            if session_id:
                self.client.call("CloseSession", job_service_pb2.CloseSessionRequest(session_id=session_id))
        finally:
            if self._own_client and session_id:
                self.client.close()

    def __enter__(self) -> "RemoteInteractiveModel":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RemoteInteractiveModel", "metric_fn_form", "Error"]
