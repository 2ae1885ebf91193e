#!/usr/bin/env python3
"""Writes the hand-made FSDP2 profiler traces the importer tests work out by hand
(tests/traces/kineto_import_test.cc). Range names follow FSDP2's record_function calls
(torch/distributed/fsdp/_fully_shard/_fsdp_state.py and _fsdp_param_group.py): with_fqn
turns "FSDP::pre_forward" into "FSDP::pre_forward (layers.0)", the root unit has no FQN,
and after a unit's backward FSDP2 records FSDP::post_backward_accumulate,
FSDP::post_backward_reshard and (with gradient sync) FSDP::post_backward_reduce.
Times are microseconds. Run: python3 tests/data/make_fsdp2_traces.py"""
import json
import os

AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS = "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
HERE = os.path.dirname(os.path.abspath(__file__))


class Trace:
    def __init__(self):
        self.events = []

    def x(self, name, cat, tid, ts, dur, args=None, pid=100):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            e["args"] = args
        self.events.append(e)

    def fsdp(self, what, unit, tid, ts, dur):
        self.x(f"FSDP::{what}" + (f" ({unit})" if unit else ""), "user_annotation", tid, ts, dur)

    def launch(self, corr, tid, ts, kernel, stream, start, end, collective=None):
        self.x("cudaLaunchKernel", "cuda_runtime", tid, ts, 2, {"correlation": corr})
        args = {"device": 0, "stream": stream, "correlation": corr}
        if collective:
            kind, n_in, n_out = collective
            args.update({"Collective name": kind, "In msg nelems": n_in, "Out msg nelems": n_out,
                         "Group size": 4, "dtype": "BFloat16"})
        self.x(kernel, "kernel", stream, start, end - start, args, pid=0)

    def memory(self, ts, allocated, reserved):
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                            "pid": 100, "tid": 1, "ts": ts,
                            "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 0,
                                     "Total Allocated": allocated, "Total Reserved": reserved}})

    def write(self, name, comment):
        doc = {"schemaVersion": 1, "_comment": comment,
               "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 4},
               "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
               "traceEvents": self.events}
        with open(os.path.join(HERE, name), "w") as f:
            json.dump(doc, f, indent=0)
            f.write("\n")


def two_layers():
    t = Trace()
    t.x("ProfilerStep#2", "user_annotation", 1, 0, 900)  # an earlier step, left out
    t.launch(100, 1, 10, GEMM, 7, 20, 50)
    t.x("ProfilerStep#3", "user_annotation", 1, 1000, 1000)
    # forward on the main thread (tid 1)
    t.fsdp("pre_forward", "", 1, 1000, 10)
    t.launch(1, 1, 1005, AG, 20, 1010, 1030, ("_allgather_base", 100, 400))
    t.fsdp("pre_forward", "layers.0", 1, 1020, 10)
    t.launch(2, 1, 1025, AG, 20, 1030, 1060, ("_allgather_base", 1000, 4000))
    t.x("aten::mm", "cpu_op", 1, 1038, 5, {"Sequence number": 11})
    t.launch(3, 1, 1040, GEMM, 7, 1060, 1100)
    t.fsdp("post_forward", "layers.0", 1, 1050, 5)
    t.fsdp("pre_forward", "layers.1", 1, 1060, 10)
    t.launch(4, 1, 1065, AG, 20, 1070, 1090, ("_allgather_base", 1000, 4000))
    t.x("aten::mm", "cpu_op", 1, 1073, 5, {"Sequence number": 12})
    t.launch(5, 1, 1075, GEMM, 7, 1100, 1140)
    t.fsdp("post_forward", "layers.1", 1, 1080, 5)
    t.launch(6, 1, 1090, GEMM, 7, 1140, 1150)
    t.fsdp("post_forward", "", 1, 1095, 5)
    # backward on the autograd thread (tid 2)
    t.fsdp("pre_backward", "", 2, 1200, 5)
    t.launch(7, 2, 1210, GEMM, 7, 1150, 1170)
    t.fsdp("pre_backward", "layers.1", 2, 1220, 5)
    t.launch(8, 2, 1222, AG, 20, 1170, 1190, ("_allgather_base", 1000, 4000))
    t.launch(9, 2, 1230, GEMM, 7, 1190, 1270)
    t.fsdp("post_backward_accumulate", "layers.1", 2, 1238, 1)
    t.fsdp("post_backward_reduce", "layers.1", 2, 1240, 10)
    t.launch(10, 2, 1245, RS, 21, 1270, 1300, ("_reduce_scatter_base", 4000, 1000))
    t.fsdp("pre_backward", "layers.0", 2, 1260, 5)
    t.launch(11, 2, 1262, AG, 20, 1190, 1220, ("_allgather_base", 1000, 4000))
    t.launch(12, 2, 1270, GEMM, 7, 1270, 1350)
    t.fsdp("post_backward_accumulate", "layers.0", 2, 1278, 1)
    t.fsdp("post_backward_reduce", "layers.0", 2, 1280, 10)
    t.launch(13, 2, 1285, RS, 21, 1350, 1380, ("_reduce_scatter_base", 4000, 1000))
    t.fsdp("post_backward_accumulate", "", 2, 1298, 1)
    t.fsdp("post_backward_reduce", "", 2, 1300, 10)
    t.launch(14, 2, 1305, RS, 21, 1380, 1390, ("_reduce_scatter_base", 400, 100))
    # optimizer
    t.x("Optimizer.step#AdamW.step", "user_annotation", 1, 1400, 50)
    t.launch(15, 1, 1410, "multi_tensor_apply_kernel", 7, 1400, 1420)
    for ts, allocated, reserved in [(1025, 1000, 2048), (1065, 3000, 4096), (1300, 500, 4096)]:
        t.memory(ts, allocated, reserved)
    t.write("fsdp2_two_layers_trace.json",
            "Hand-made FSDP2 step (tests/data/make_fsdp2_traces.py): root unit and two layers, "
            "4 ranks; tests/traces/kineto_import_test.cc works it out.")


def grad_accum():
    """Two micro-batches of one layer unit under the root; the first without gradient sync
    (set_requires_gradient_sync(False)), so its backward has no post_backward_reduce."""
    t = Trace()
    t.x("ProfilerStep#7", "user_annotation", 1, 0, 2000)
    corr = 0
    for mb, base in enumerate((0, 500)):
        t.fsdp("pre_forward", "", 1, base + 10, 5)
        t.fsdp("pre_forward", "layers.0", 1, base + 20, 5)
        corr += 1
        t.launch(corr, 1, base + 30, GEMM, 7, base + 40, base + 60)
        t.fsdp("post_forward", "layers.0", 1, base + 70, 5)
        t.fsdp("post_forward", "", 1, base + 80, 5)
        t.fsdp("pre_backward", "", 2, base + 100, 5)
        t.fsdp("pre_backward", "layers.0", 2, base + 110, 5)
        corr += 1
        t.launch(corr, 2, base + 120, GEMM, 7, base + 130, base + 170)
        t.fsdp("post_backward_accumulate", "layers.0", 2, base + 180, 5)
        t.fsdp("post_backward_reshard", "layers.0", 2, base + 190, 5)
        if mb == 1:
            t.fsdp("post_backward_reduce", "layers.0", 2, base + 200, 10)
            corr += 1
            t.launch(corr, 2, base + 205, RS, 21, base + 210, base + 240,
                     ("_reduce_scatter_base", 4000, 1000))
        t.fsdp("post_backward_accumulate", "", 2, base + 250, 5)
    t.write("fsdp2_grad_accum_trace.json",
            "Hand-made FSDP2 step (tests/data/make_fsdp2_traces.py): two micro-batches, the "
            "first without gradient sync.")


if __name__ == "__main__":
    two_layers()
    grad_accum()
