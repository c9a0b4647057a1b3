#!/usr/bin/env python3
"""One f32 product [M,K]x[K,N] (BERT/MiniLM shapes) timed in torch (matmul) and ONNX Runtime (a
MatMul-only model, weights as an initializer), 2 threads, median of 200; the peers of the cpu GEMM
figures in docs/benchmarks.md. Run: python3 apps/bench/peers_gemm_shapes.py"""
import time, numpy as np, torch, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
torch.set_num_threads(2)
def bench(f, n=200):
    f(); f()
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    ts.sort(); return ts[len(ts)//2]*1e3
for (M,K,N) in [(128,384,1536),(128,1536,384),(128,384,384),(128,384,1152)]:
    a=np.random.rand(M,K).astype(np.float32); b=np.random.rand(K,N).astype(np.float32)
    ta,tb=torch.from_numpy(a),torch.from_numpy(b)
    t_t=bench(lambda: torch.matmul(ta,tb))
    W=numpy_helper.from_array(b,"W")
    g=helper.make_graph([helper.make_node("MatMul",["A","W"],["Y"])],"g",[helper.make_tensor_value_info("A",TensorProto.FLOAT,[M,K])],[helper.make_tensor_value_info("Y",TensorProto.FLOAT,[M,N])],[W])
    m=helper.make_model(g,opset_imports=[helper.make_opsetid("",17)])
    so=ort.SessionOptions(); so.intra_op_num_threads=2
    s=ort.InferenceSession(m.SerializeToString(),so,providers=["CPUExecutionProvider"])
    t_o=bench(lambda: s.run(None,{"A":a}))
    gf=2*M*K*N/1e9
    print(f"{M}x{K}x{N}: torch {t_t:.3f} ms ({gf/t_t*1e3:.0f} GF/s)  ort {t_o:.3f} ms ({gf/t_o*1e3:.0f} GF/s)")
