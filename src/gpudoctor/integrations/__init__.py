"""Framework hooks that write the same run bundle as ``gpudoctor run``.

Each one marks one step per optimizer step, profiles the window ``skip + 2 .. skip + 1 + steps`` and
writes ``trace.json.gz``, ``env.json``, ``report.json`` and ``report.html`` in a run directory; in a
distributed job the ranks agree on the steps (capture/rank_window.py) and each writes
``<name>-<stamp>/rank<R>/``, rank 0 the combined report at the top:

- ``gpudoctor.integrations.lightning.GpuDoctorCallback``: a Lightning ``Callback``;
- ``gpudoctor.integrations.huggingface.GpuDoctorCallback``: a Hugging Face ``TrainerCallback``;
- ``gpudoctor.integrations.profile(accelerator=...)``: a context for hand-written loops
  (accelerate, torch.distributed or a single process).

Nothing here imports Lightning, transformers or accelerate until its own module is imported.
"""

from __future__ import annotations

from gpudoctor.integrations.context import Profile, profile

__all__ = ["Profile", "profile"]
