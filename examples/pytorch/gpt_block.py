"""A small GPT (pre-LN transformer blocks with attention and MLP dropout) for
`python3 -m ckpt_harness.torch verify`:

    python3 -m ckpt_harness.torch verify examples/pytorch/gpt_block.py --wrap 'blocks.*' \
        --modes nonreentrant,reentrant

Healthy in every mode that replays the RNG; `--modes no-preserve-rng` is the canary of a
dropout mask redrawn on recompute.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, SEQ, BATCH, LAYERS = 32, 32, 4, 8, 4, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, dropout=0.1, batch_first=True)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * DIM, DIM)
        self.drop = nn.Dropout(0.1)
        self.register_buffer("causal", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1),
                             persistent=False)

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.causal, need_weights=False)
        x = x + a
        return x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def build():
    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (3, BATCH, SEQ + 1))

    def inputs(step):
        return (data[step % 3, :, :-1],)

    def loss_fn(logits, step):
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(),
                               data[step % 3, :, 1:].reshape(-1))
    return GPT(), inputs, loss_fn
