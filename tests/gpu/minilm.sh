#!/usr/bin/env bash
# all-MiniLM-L6-v2 on a machine with an NVIDIA GPU, in one go (docs/models.md):
#   MINILM_CONFIG=DIR tests/gpu/minilm.sh
# The lent GPU machine cannot download the weights and the device tool carries at most 64 MiB,
# so DIR holds the model folder without its weights (config.json, vocab.txt, modules.json,
# sentence_bert_config.json, 1_Pooling/config.json; 256 KiB) and this script gives it random
# weights of the right shapes (transformers' BertModel initialisation, seed 0) in
# $BUILD/minilm-random: latency does not depend on the values. Then, on that folder:
# `rlx embed --device cuda` against transformers on the GPU and against rlx's cpu device
# (the smallest cosine of three sentences), and apps/bench/peers_minilm.py --device cuda
# (rlx-bench embed --device cuda beside torch eager, sdpa and torch.compile) at batch 1, 8, 32.
# Builds rlx and rlx-bench in build-gpu through run.sh (TESTS=- : no suites). Output in $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export BUILD=${BUILD:-$ROOT/build-gpu}
export OUT=${OUT:-$BUILD/out}
CONFIG=${MINILM_CONFIG:?set MINILM_CONFIG to the model folder without weights}
if [ ! -x "$BUILD/bin/rlx-bench" ]; then
  TESTS=- "$ROOT/tests/gpu/run.sh" quick || exit 1
fi
[ -d /tmp/deps/usr/lib/x86_64-linux-gnu ] && export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODEL=$BUILD/minilm-random
rm -rf "$MODEL" && cp -r "$CONFIG" "$MODEL"
python3 - "$MODEL" <<'EOF' || exit 1
import sys, torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
m = BertModel(BertConfig.from_pretrained(sys.argv[1]), add_pooling_layer=False).eval()
m.save_pretrained(sys.argv[1], safe_serialization=True)
print("random weights:", sum(p.numel() for p in m.parameters()), "parameters")
EOF
S1="A man is eating food."; S2="The new movie is awesome, truly one of the best this year!"; S3="rlx"
rc=0
for d in cuda cpu; do
  "$BUILD/bin/rlx" embed --model "$MODEL" --device $d --out "$OUT/emb_$d.npy" "$S1" "$S2" "$S3" >"$OUT/embed_$d.log" 2>&1 ||
    { echo "rlx embed --device $d failed"; tail -5 "$OUT/embed_$d.log"; rc=1; }
done
python3 - "$MODEL" "$OUT" "$S1" "$S2" "$S3" <<'EOF' || rc=1
import sys, numpy as np, torch
from sentence_transformers import SentenceTransformer
m = SentenceTransformer(sys.argv[1], device="cuda")
ref = m.encode(sys.argv[3:], convert_to_numpy=True, normalize_embeddings=True)
cuda, cpu = np.load(sys.argv[2] + "/emb_cuda.npy"), np.load(sys.argv[2] + "/emb_cpu.npy")
c1 = float(np.min(np.sum(cuda * ref, 1))); c2 = float(np.min(np.sum(cuda * cpu, 1)))
print(f"rlx cuda vs sentence-transformers (cuda): min cosine {c1:.8f}; rlx cuda vs rlx cpu: {c2:.8f}")
sys.exit(0 if min(c1, c2) >= 0.99999 else 1)
EOF
PYTHONUNBUFFERED=1 python3 "$ROOT/apps/bench/peers_minilm.py" --device cuda --model "$MODEL" --rlx "$BUILD/bin/rlx-bench" \
  --reps 50 2>&1 | tee "$OUT/minilm_cuda.txt"
exit $rc
