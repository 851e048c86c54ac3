# %% [markdown]
# # Fine-tuning from a notebook
#
# T5X's Colab workflow against a Trainyard coordinator: open the
# interactive model on a trained job's newest checkpoint (held by one of the
# coordinator's idle workers), evaluate it with a metric written here in
# Python, fine-tune it a few steps on examples typed in, evaluate again,
# save the checkpoint, and carry on as a batch job from it.
#
# Each `# %%` starts a cell (Jupyter, VS Code and `jupytext` read them); run
# as a script it runs every cell:
#
#     pip install ./python
#     TRAINYARD_COORDINATOR=HOST:PORT NOTEBOOK_JOB=<a finished training job> \
#         python3 examples/notebook_finetune.py
#
# NOTEBOOK_OUTPUT_DIR (where the fine-tuned checkpoint and the batch job's
# output go; the workers must be able to write there), NOTEBOOK_STEPS
# (interactive steps, default 10) and NOTEBOOK_JOB_STEPS (the batch job's
# further steps, default 10) are optional. TLS and the bearer token come from
# TRAINYARD_TLS_* and TRAINYARD_TOKEN(_FILE), as for the CLI.

# %%
import os
import statistics
import tempfile

import trainyard

client = trainyard.JobClient()  # TRAINYARD_COORDINATOR
base_job = client.status(os.environ["NOTEBOOK_JOB"])
output_dir = os.environ.get("NOTEBOOK_OUTPUT_DIR") or tempfile.mkdtemp(prefix="notebook-")
steps = int(os.environ.get("NOTEBOOK_STEPS", "10"))
job_steps = int(os.environ.get("NOTEBOOK_JOB_STEPS", "10"))
print(f"base job {base_job.job_id}: {trainyard.job_state_name(base_job.state)} at step {base_job.step}, "
      f"checkpoint {base_job.latest_checkpoint}")

# %% [markdown]
# Examples as T5X's InteractiveModel takes them: dicts of "input" and
# "target" (a bare string is an input without a target).

# %%
train_examples = [
    {"input": "12", "target": "twelve"},
    {"input": "40", "target": "forty"},
    {"input": "115", "target": "one hundred fifteen"},
    {"input": "7", "target": "seven"},
    {"input": "300", "target": "three hundred"},
    {"input": "18", "target": "eighteen"},
    {"input": "1234", "target": "one thousand two hundred thirty-four"},
    {"input": "99", "target": "ninety-nine"},
]
eval_examples = [
    {"input": "13", "target": "thirteen"},
    {"input": "50", "target": "fifty"},
    {"input": "216", "target": "two hundred sixteen"},
    {"input": "8", "target": "eight"},
]

# %% [markdown]
# A metric function of seqio's (targets, predictions) form, computed here
# over the worker's predictions, and one of the (targets, scores) form.


# %%
def word_accuracy(targets, predictions):
    """The fraction of target words found at the same position."""
    right = total = 0
    for target, prediction in zip(targets, predictions):
        t, p = target.split(), prediction.split()
        right += sum(a == b for a, b in zip(t, p))
        total += len(t)
    return {"word_accuracy": right / total}


def mean_target_log_likelihood(targets, scores):
    return {"mean_target_log_likelihood": statistics.fmean(scores)}


# %%
lengths = base_job.spec.feature_lengths
model = trainyard.RemoteInteractiveModel(
    client, job_id=base_job.job_id, batch_size=len(train_examples),
    task_feature_lengths={"inputs": lengths.inputs, "targets": lengths.targets},
    output_dir=os.path.join(output_dir, "interactive"))
print(f"session {model.session_id} on worker {model.worker_ids[0]}, step {model.step}")
before = model.evaluate(eval_examples, [word_accuracy, mean_target_log_likelihood, "exact_match"])
print("before:", before)

# %% [markdown]
# Fine-tune: one step per call on the batch of examples.

# %%
for _ in range(steps):
    metrics = model.train_step(train_examples)
    print(f"step {model.step}: loss {metrics['loss']:.4f}")
after = model.evaluate(eval_examples, [word_accuracy, mean_target_log_likelihood, "exact_match"])
print("after:", after)
predictions, aux = model.predict_with_aux([x["input"] for x in eval_examples])
for x, prediction, score in zip(eval_examples, predictions, aux["scores"]):
    print(f"  {x['input']:>6} -> {prediction}  ({score:.3f})")

# %% [markdown]
# Save the fine-tuned model and give the worker back.

# %%
checkpoint = model.save_checkpoint()
final_step = model.step
model.close()
print(f"saved {checkpoint} (step {final_step})")

# %% [markdown]
# Carry on as a batch job: the base job's spec, now FINETUNING from the
# saved checkpoint for job_steps more steps.

# %%
spec = trainyard.job_pb2.JobSpec()
spec.CopyFrom(base_job.spec)
spec.kind = trainyard.job_pb2.FINETUNING
spec.restore.Clear()
spec.restore.mode = trainyard.job_pb2.RestoreConfig.SPECIFIC
spec.restore.path = checkpoint
spec.total_steps = final_step + job_steps
spec.output_dir = os.path.join(output_dir, "finetune")
with open(os.path.join(output_dir, "finetune.textproto"), "w") as f:
    f.write(str(spec))  # `trainyard submit` takes this file too
job_id = client.submit(spec).job_id
final = client.wait(job_id, timeout=600)
print(f"exported job {job_id}: {trainyard.job_state_name(final.state)} at step {final.step}, "
      f"checkpoint {final.latest_checkpoint}")
