"""Published figures next to the iteration model's own, with the gap explained.

Nothing here feeds back into the model: each entry names its source, the
published figure, the setting, and computes the model's figure for that
setting from the chip data, the plans and the engine calibration alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from model.chips import load_chip
from model.engine_cost import EngineCosts
from model.models import load_model
from model.plan import make_plan
from model.specs import parse_spec


@dataclass(frozen=True)
class Comparison:
    topic: str
    source: str
    setting: str
    published: str
    model: Callable[[EngineCosts], str]
    gap: str


def _plan_bytes(model: str, train: str, rollout: str, scheme: str) -> int:
    m = load_model(model)
    return max(make_plan(m, parse_spec(train, "train"), parse_spec(rollout, "rollout"), "bf16", scheme).bytes_in)


def _hybridflow_volumes(_costs) -> str:
    # HybridFlow's Table 2 setting family: training t=8, p=2, d=8 (128 GPUs), generation t_g=4, p_g=1
    m = load_model("llama-3.1-70b")
    M = m.numel * 2
    t, p, d, tg, pg = 8, 2, 8, 4, 1
    pub = {"DS-Chat": (t * p * d - 1) / (t * p * d) * M, "HybridFlow-V": (t * p - 1) / (t * p) * M,
           "HybridFlow": (t * p - tg * pg) / (tg * pg * t * p) * M}
    train, roll = f"megatron:tp={t},pp={p},dp={d}", f"vllm:tp={tg}"
    ours = {s: _plan_bytes("llama-3.1-70b", train, roll, s) for s in ("verl", "hybridflow", "minimal")}
    return ("Table 2 formulas for llama-3.1-70b, t=8 p=2 d=8 -> t_g=4: "
            + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in pub.items())
            + "; the plans, max bytes into a rank: "
            + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in ours.items()))


def _sync_time(chip: str, model: str, train: str, rollout: str, costs: EngineCosts) -> dict:
    from model.perf import weight_sync
    c = load_chip(chip)
    m = load_model(model)
    rows = weight_sync(m, c, parse_spec(train, "train"), parse_spec(rollout, "rollout"), "bf16", costs)
    return {f"{r.scheme}/{r.path}": r.time_s for r in rows}


def _transition_cut(costs) -> str:
    t = _sync_time("a100-80gb-sxm", "llama-3.1-70b", "megatron:tp=8,pp=2,dp=8", "vllm:tp=4", costs)
    v, h, ip = t["verl/software"], t["hybridflow/software"], t["minimal/ip"]
    return (f"70B on 128 A100: verl's all-gather path {v:.2f} s, HybridFlow's plan {h:.2f} s "
            f"(cut {100 * (1 - h / v):.1f}%), the IP {ip:.2f} s (cut {100 * (1 - ip / v):.1f}%)")


def _rollout_share(costs) -> str:
    from model.perf import Workload, iteration
    out = []
    for chip in ("a100-80gb-sxm", "h100-sxm"):
        r = iteration(load_model("qwen2.5-7b"), load_chip(chip), parse_spec("fsdp2:dp=8", "train"),
                      parse_spec("vllm:tp=2", "rollout"), Workload(), costs)
        roll = sum(p["time_s"] for p in r["phases"] if p["name"].startswith("rollout"))
        out.append(f"{chip} {100 * roll / r['iteration_s']:.0f}%")
    return "qwen2.5-7b GRPO, 8 chips, default workload: rollout share " + ", ".join(out)


def _verl_pr116(costs) -> str:
    t = _sync_time("l20", "qwen2.5-7b", "fsdp2:dp=8", "vllm:tp=4", costs)
    return f"qwen2.5-7b fsdp2:dp=8 -> vllm:tp=4 on 8x L20: verl's path {t['verl/software']:.2f} s, " \
           f"the IP {t['minimal/ip']:.3f} s"


def _broadcast_7b(_costs) -> str:
    c = load_chip("h100-sxm")
    m = load_model("qwen2.5-7b")
    nbytes = m.numel * 2
    return (f"qwen2.5-7b bf16 ({nbytes / 1e9:.1f} GB) broadcast to another node: "
            f"{nbytes / c.link_bytes_per_s(c.chips_per_node + 1):.2f} s at {c.name}'s achievable NIC rate; "
            f"{nbytes / c.link_bytes_per_s(2):.3f} s inside a node")


def _sglang_70b(costs) -> str:
    c = load_chip("h100-sxm")
    nbytes = load_model("llama-3.1-70b").numel * 2
    t = _sync_time("h100-sxm", "llama-3.1-70b", "fsdp2:dp=8", "vllm:tp=8", costs)
    return (f"llama-3.1-70b bf16 {nbytes / 1e9:.0f} GB over one NIC: {nbytes / c.link_bytes_per_s(9):.1f} s; "
            f"colocated on 8 H100 (fsdp2:dp=8 -> vllm:tp=8): verl's path {t['verl/software']:.2f} s, "
            f"the IP {t['minimal/ip']:.3f} s")


COMPARISONS = (
    Comparison("transition volume", "HybridFlow, arXiv 2409.19256, Table 2",
               "per-GPU all-gather volume of the train->generate transition, model size M",
               "DS-Chat (tpd-1)/(tpd) M; HybridFlow-V (tp-1)/(tp) M; HybridFlow (tp-t_g p_g)/(t_g p_g t p) M",
               _hybridflow_volumes,
               "the verl scheme gathers the whole model on every rank like DS-Chat's (minus the rank's own "
               "share); the hybridflow plan counts bytes into a rank, which is the Table 2 HybridFlow volume; "
               "the minimal plan moves only the bytes a rollout rank lacks and ends at or below HybridFlow's"),
    Comparison("transition time", "HybridFlow, arXiv 2409.19256, Section 8.3",
               "16 machines x 8 A100-80GB, NVLink 600 GB/s, against OpenRLHF",
               "transition time cut 55.2% on average, 89.1% at 70B",
               _transition_cut,
               "the paper measures real NCCL and resharding code against OpenRLHF's broadcast from rank 0; "
               "the model has only the wire and HBM walls of verl's bucketed all-gather, so its cut for the "
               "hybridflow plan is the byte ratio; the IP cut adds no software overhead at all"),
    Comparison("rollout share", "OpenRLHF, arXiv 2405.11143",
               "PPO on 7B-70B models, vLLM generation",
               "generation takes about 80% of an RLHF step",
               _rollout_share,
               "the model runs decode at its roofline with every sequence at full length and no scheduler, "
               "sampling or Python time; real decode runs at small effective batches and waits for the "
               "longest response, so the measured share is higher than the roofline share"),
    Comparison("weight sync, PCIe", "verl PR 116",
               "Qwen2.5-7B, colocated FSDP -> vLLM TP=4, 8x L20",
               "0.55 s per sync",
               _verl_pr116,
               "L20 has no NVLink: the all-gather runs on PCIe at about 26 GB/s achievable, so the wire wall "
               "alone is close to the measured time"),
    Comparison("weight sync, broadcast", "allenai/open-instruct (vLLM weight broadcast)",
               "7B-class policy, learner to vLLM engines over NCCL",
               "about 0.5 s of pure NCCL broadcast",
               _broadcast_7b,
               "open-instruct's engines sit on other nodes, so the broadcast crosses the NIC; "
               "inside a node NVLink makes it ten times faster"),
    Comparison("weight sync, 70B", "sglang issue 2708",
               "70B model, update_weights_from_distributed",
               "wire bound 140 GB / 50 GB/s = 2.8 s, about 80 s observed",
               _sglang_70b,
               "the 80 s is per-tensor Python, serialisation and synchronisation, none of which is a wall "
               "of this model; the model's figure is what the walls allow, the gap is software"),
)


def comparison_rows(costs: EngineCosts) -> list[dict]:
    return [{"topic": c.topic, "source": c.source, "setting": c.setting, "published": c.published,
             "model": c.model(costs), "gap": c.gap} for c in COMPARISONS]
