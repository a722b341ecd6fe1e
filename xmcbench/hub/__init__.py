"""The Hugging Face Hub: publish trained models and results, evaluate published checkpoints.

- ``push_run(run, "ORG/NAME")``: a finished run's model (sentence-transformers folder + the
  method's parts as safetensors), model card, record and recipe, as one commit (push.py, folder.py,
  card.py);
- ``load("ORG/NAME")``: that model back as a predictor with ``predict`` and ``evaluate`` (load.py);
- ``push_results("ORG/NAME")`` / ``fetch_results("hf://datasets/ORG/NAME")``: finished run
  records shared through a dataset repo (results.py);
- ``hf://ORG/NAME[@REV]`` as a recipe's encoder name downloads a published checkpoint
  (``xmcbench.encoders.hub_ref``, below the methods so every method can use it).

Tokens are taken the way huggingface_hub takes them (``HF_TOKEN``, the stored login) and never
written anywhere; ``HF_ENDPOINT`` points everything at another Hub (tests use a local one).
"""

from xmcbench.encoders.hub_ref import HubRef, download_checkpoint, parse_hub_ref
from xmcbench.hub.load import HubModel, load
from xmcbench.hub.push import PushResult, check_repo_id, push_run, pushes
from xmcbench.hub.results import fetch_results, merged_store, push_results

__all__ = [
    "HubModel",
    "HubRef",
    "PushResult",
    "check_repo_id",
    "download_checkpoint",
    "fetch_results",
    "load",
    "merged_store",
    "parse_hub_ref",
    "push_results",
    "push_run",
    "pushes",
]
