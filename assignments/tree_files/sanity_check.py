"""The course's sanity check: your BERT, with bert-base-uncased's weights, against the outputs in sanity_check.data.

    python sanity_check.py      # from the tree's root

The inputs, the stored outputs (sanity_check.data) and the comparison are the CS224N starter's own. It needs
bert-base-uncased: downloaded from the Hugging Face Hub the first time (about 440 MB), or found in its cache. Your
attention() runs, not torch's fused kernel. Offline, `python -m assignments.check model` compares your BERT with the
packaged MiniLM instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import minbert  # first: it refuses a Python older than 3.10 in one line

HERE = Path(__file__).resolve().parent

import torch

OFFLINE = ("sanity_check.py needs bert-base-uncased (downloaded from the Hugging Face Hub once, or found in its "
           "cache); offline, run  python -m assignments.check model  instead: it compares your BERT with the "
           "packaged MiniLM")


def main() -> int:
    if Path(minbert.__file__).resolve().parents[1] != HERE:
        print(f"minbert was imported from {Path(minbert.__file__).parent}, not from this tree {HERE}: run "
              f"python sanity_check.py from {HERE}; if it still does, pip uninstall minbert", file=sys.stderr)
        return 2
    sanity_data = torch.load(HERE / "sanity_check.data", weights_only=True)
    # text_batch = ["hello world", "hello neural network for NLP"], tokenized
    sent_ids = torch.tensor([[101, 7592, 2088, 102, 0, 0, 0, 0],
                             [101, 7592, 15756, 2897, 2005, 17953, 2361, 102]])
    att_mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])

    try:   # your attention(): attn_implementation="eager" (the fused kernel is the reference's fast path)
        bert = minbert.load_pretrained("bert-base-uncased", attn_implementation="eager")
    except minbert.CheckpointError as e:
        print(e, file=sys.stderr)
        print(OFFLINE, file=sys.stderr)
        return 1
    try:
        with torch.no_grad():
            out = bert(sent_ids, att_mask)
    except NotImplementedError as e:
        from tasks.core.unfinished import unfinished_message
        print(unfinished_message(e) or f"NotImplementedError: {e}", file=sys.stderr)
        return 1
    att_mask = att_mask.unsqueeze(-1)      # padding positions' outputs are not compared
    outputs = {"last_hidden_state": out.last_hidden_state * att_mask, "pooler_output": out.pooler_output}
    sanity_data["last_hidden_state"] = sanity_data["last_hidden_state"] * att_mask

    for k in ["last_hidden_state", "pooler_output"]:
        print(f"Checking {k}")
        print(f"Your output shape: {outputs[k].shape}")
        print(f"Sanity check shape: {sanity_data[k].shape}")
        same_shape = outputs[k].shape == sanity_data[k].shape
        if not same_shape or not torch.allclose(outputs[k], sanity_data[k], atol=1e-5, rtol=1e-3):
            diff = f"max abs diff {(outputs[k] - sanity_data[k]).abs().max().item():.3g}" if same_shape else "shapes"
            print(f"Sanity check failed: your {k} differs from sanity_check.data ({diff}; tolerance atol=1e-5, "
                  "rtol=1e-3). python -m assignments.check core says which part differs", file=sys.stderr)
            return 1
    print("Your BERT implementation is correct!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
