#!/usr/bin/env python3
"""Writes the small ONNX models tests/io/test_onnx.cpp imports, their inputs and onnxruntime's
outputs (data/onnx/README.md lists them). Seeded: a rerun writes the same models and inputs.
Run from the repository root:  python3 data/onnx/make_onnx_models.py
Needs torch, onnx, onnxruntime and numpy (pip)."""
import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def path(name):
    return os.path.join(HERE, name)


def reference(model_file, feeds, out_prefix):
    """onnxruntime's outputs (CPU provider) for feeds, written as <out_prefix>_out<i>.npy."""
    s = ort.InferenceSession(path(model_file), providers=["CPUExecutionProvider"])
    outs = s.run(None, feeds)
    for i, o in enumerate(outs):
        np.save(path(f"{out_prefix}_out{i}.npy"), o)
    for k, v in feeds.items():
        np.save(path(f"{out_prefix}_in_{k}.npy"), v)


def export(module, args, name, input_names, output_names, dynamic_axes):
    # The TorchScript exporter (dynamo=False): the graphs BERT-family exports in the wild have,
    # with Shape -> Gather -> Concat -> Reshape chains. do_constant_folding=False keeps
    # BatchNormalization apart from the convolution before it.
    torch.onnx.export(module, args, path(name), dynamo=False, opset_version=17, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes, do_constant_folding=False)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 10)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = torch.relu(self.fc2(h)) + h
        return torch.softmax(self.fc3(h), dim=-1)


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.avg = torch.nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        h = self.avg(torch.sigmoid(self.conv2(h)))
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1)
        return self.fc(torch.flatten(h, 1))


def torch_models():
    torch.manual_seed(20261202)
    mlp = Mlp().eval()
    export(mlp, (torch.randn(3, 16),), "mlp.onnx", ["x"], ["probs"], {"x": {0: "batch"}, "probs": {0: "batch"}})
    rng = np.random.default_rng(1)
    reference("mlp.onnx", {"x": rng.standard_normal((3, 16), dtype=np.float32)}, "mlp")

    cnn = Cnn()
    with torch.no_grad():  # running statistics other than 0 and 1
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
        cnn.bn.weight.uniform_(0.5, 1.5)
        cnn.bn.bias.uniform_(-0.2, 0.2)
    cnn.eval()
    export(cnn, (torch.randn(2, 1, 12, 12),), "cnn.onnx", ["image"], ["logits"], {"image": {0: "n"}, "logits": {0: "n"}})
    reference("cnn.onnx", {"image": rng.standard_normal((2, 1, 12, 12), dtype=np.float32)}, "cnn")


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name), name=name)


def ops_model(opset):
    """One graph over the operators whose form changes with the opset (Squeeze, Unsqueeze,
    ReduceMean, ReduceSum, Split, Slice, Softmax) and the shape computations torch exports
    (Shape, Gather, Concat, Reshape, Range, ConstantOfShape, Expand, Equal, Where, Cast), GatherND."""
    rng = np.random.default_rng(opset)
    nodes = []
    inits = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((3, 24)).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal((3,)).astype(np.float32), "gb")]

    def axes_node(op, inputs, out, axes, name, **kw):
        # the axes as an attribute before `from_opset`, an input from there on
        from_opset = {"Squeeze": 13, "Unsqueeze": 13, "ReduceSum": 13, "ReduceMean": 18, "Split": 13}[op]
        if opset >= from_opset:
            nodes.append(const(name + "_axes", np.array(axes, dtype=np.int64)))
            nodes.append(helper.make_node(op, inputs + [name + "_axes"], out, name=name, **kw))
        else:
            key = "split" if op == "Split" else "axes"
            nodes.append(helper.make_node(op, inputs, out, name=name, **{key: axes}, **kw))

    N = helper.make_node
    nodes += [N("Shape", ["x"], ["shape"], name="shape"), const("zero", np.array(0, dtype=np.int64)),
              N("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0)]
    axes_node("Unsqueeze", ["batch"], ["batch1"], [0], "batch1")
    nodes += [const("minus1", np.array([-1], dtype=np.int64)),
              N("Concat", ["batch1", "minus1"], ["flat_shape"], name="flat_shape", axis=0),
              N("Reshape", ["x", "flat_shape"], ["flat"], name="flat")]  # [B, 24]
    axes_node("ReduceMean", ["flat"], ["mean"], [1], "mean", keepdims=1)
    nodes.append(N("Sub", ["flat", "mean"], ["centred"], name="centred"))
    axes_node("Split", ["centred"], ["p0", "p1"], [8, 16], "split", axis=1)
    axes_node("Unsqueeze", ["p0"], ["p0u"], [1], "p0u")
    axes_node("Squeeze", ["p0u"], ["p0s"], [1], "p0s")
    nodes += [const("s_start", np.array([2], dtype=np.int64)), const("s_end", np.array([-2], dtype=np.int64)),
              const("s_axes", np.array([1], dtype=np.int64)), const("s_steps", np.array([2], dtype=np.int64)),
              N("Slice", ["p1", "s_start", "s_end", "s_axes", "s_steps"], ["p1s"], name="slice"),  # [B, 6]
              N("Concat", ["p0s", "p1s"], ["cat"], name="cat", axis=1),  # [B, 14]
              const("zero_f", np.array(0.0, dtype=np.float32)), const("tenth", np.array(0.1, dtype=np.float32)),
              N("Greater", ["cat", "zero_f"], ["pos"], name="pos"), N("Mul", ["cat", "tenth"], ["leak"], name="leak"),
              N("Where", ["pos", "cat", "leak"], ["leaky"], name="leaky"),
              N("Softmax", ["leaky"], ["out0"], name="softmax", axis=-1)]
    # Range over the second dimension, a one-hot mask through Equal, Cast and Expand.
    nodes += [const("one", np.array(1, dtype=np.int64)), N("Gather", ["shape", "one"], ["rows"], name="rows", axis=0),
              N("Range", ["zero", "rows", "one"], ["positions"], name="positions"),
              const("three", np.array(3, dtype=np.int64)), N("Equal", ["positions", "three"], ["is3"], name="is3"),
              N("Cast", ["is3"], ["is3f"], name="is3f", to=TensorProto.FLOAT),
              N("Shape", ["positions"], ["pshape"], name="pshape"),
              N("ConstantOfShape", ["pshape"], ["ones"], name="ones",
                value=numpy_helper.from_array(np.array([1.0], dtype=np.float32))),
              N("Add", ["is3f", "ones"], ["weights"], name="weights"),
              N("Concat", ["batch1", "pshape"], ["bshape"], name="bshape", axis=0),
              N("Expand", ["weights", "bshape"], ["wexp"], name="wexp")]  # [B, 6]
    axes_node("ReduceSum", ["x"], ["xsum"], [2], "xsum", keepdims=0)  # [B, 6]
    nodes += [N("Abs", ["xsum"], ["xabs"], name="xabs"), N("Sqrt", ["xabs"], ["xsqrt"], name="xsqrt"),
              const("two", np.array(2.0, dtype=np.float32)), N("Pow", ["xsqrt", "two"], ["xpow"], name="xpow"),
              N("Tanh", ["xpow"], ["xtanh"], name="xtanh"), N("Mul", ["xtanh", "wexp"], ["w2"], name="w2"),
              N("Sigmoid", ["w2"], ["out1"], name="sigmoid")]
    # MatMul of a batch of matrices by a weight; Gemm with transA, alpha and beta; Transpose, Identity, Dropout.
    nodes += [N("MatMul", ["x", "w"], ["xw"], name="xw"), N("Transpose", ["xw"], ["xwt"], name="xwt", perm=[0, 2, 1]),
              N("Identity", ["xwt"], ["xwi"], name="xwi"), N("Dropout", ["xwi"], ["out2"], name="dropout"),
              N("Transpose", ["flat"], ["flat_t"], name="flat_t"),
              N("Gemm", ["flat_t", "g", "gb"], ["out3"], name="gemm", transA=1, transB=1, alpha=0.5, beta=2.0)]
    outputs = [helper.make_tensor_value_info("out0", TensorProto.FLOAT, ["B", 14]),
               helper.make_tensor_value_info("out1", TensorProto.FLOAT, ["B", 6]),
               helper.make_tensor_value_info("out2", TensorProto.FLOAT, ["B", 5, 6]),
               helper.make_tensor_value_info("out3", TensorProto.FLOAT, ["B", 3])]
    # GatherND (index tuples into the first two axes, one negative), as torch's dynamo exporter writes boolean indexing.
    nodes += [const("tuples", np.array([[0, 1], [2, -1], [1, 3]], dtype=np.int64)),
              N("GatherND", ["x", "tuples"], ["picked"], name="gather_nd")]
    outputs.append(helper.make_tensor_value_info("picked", TensorProto.FLOAT, [3, 4]))
    if opset >= 17:
        nodes += [const("ln_scale", rng.uniform(0.5, 1.5, 14).astype(np.float32)),
                  const("ln_bias", rng.uniform(-0.5, 0.5, 14).astype(np.float32)),
                  N("LayerNormalization", ["cat", "ln_scale", "ln_bias"], ["out4"], name="layer_norm", axis=-1, epsilon=1e-5)]
        outputs.append(helper.make_tensor_value_info("out4", TensorProto.FLOAT, ["B", 14]))
    g = helper.make_graph(nodes, f"ops{opset}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 6, 4])],
                          outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_onnx_models.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path(f"ops{opset}.onnx"))
    reference(f"ops{opset}.onnx", {"x": rng.standard_normal((3, 6, 4)).astype(np.float32)}, f"ops{opset}")


def bad_models():
    """Models the importer must refuse, each for one reason (test_onnx checks the message)."""
    N = helper.make_node
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])

    def save(name, nodes, inits=(), inputs=(x,), outputs=(y,), opset=17):
        g = helper.make_graph(nodes, name, list(inputs), list(outputs), initializer=list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_onnx_models.py")
        onnx.save(m, path(f"bad_{name}.onnx"))

    save("unsupported", [N("Relu", ["x"], ["r"], name="fine_relu"), N("NonZero", ["r"], ["nz"], name="where_nonzero"),
                         N("Einsum", ["r", "r"], ["e"], name="my_einsum", equation="ij,ij->ij"),
                         N("FancyOp", ["e"], ["y"], name="custom", domain="com.example")])
    save("cycle", [N("Add", ["x", "b"], ["a"], name="first"), N("Relu", ["a"], ["b"], name="second"),
                   N("Identity", ["a"], ["y"], name="out")])
    save("undefined", [N("Add", ["x", "nowhere"], ["y"], name="reads_nothing")])
    save("twice", [N("Relu", ["x"], ["y"], name="one"), N("Relu", ["x"], ["y"], name="two")])
    short = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], vals=b"\0" * 24, raw=True)
    short.raw_data = b"\0" * 20  # 24 bytes needed
    save("short_raw", [N("Add", ["x", "w"], ["y"], name="add")], inits=[short])
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 40])  # no data
    save("huge_dims", [N("Add", ["x", "w"], ["y"], name="add")], inits=[huge])
    ext = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    ext.data_location = TensorProto.EXTERNAL
    ext.external_data.add(key="location", value="../../etc/passwd")
    save("external_escape", [N("Add", ["x", "w"], ["y"], name="add")], inits=[ext])
    xs = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    save("symbolic", [N("Relu", ["x"], ["y"], name="relu")], inputs=[xs])


if __name__ == "__main__":
    torch_models()
    for opset in (11, 13, 18):
        ops_model(opset)
    bad_models()
    total = sum(os.path.getsize(path(f)) for f in os.listdir(HERE))
    print(f"data/onnx: {len(os.listdir(HERE))} files, {total} bytes")
