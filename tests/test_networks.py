"""The network zoo (perfcast.networks): registry, published parameter counts, output shapes, Relax import."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from perfcast.errors import PerfcastError, UnknownNameError
from perfcast.networks import FAMILIES, count_params, get_network, list_networks, torch_to_relax

# Published parameter counts, independent of our code. Sources:
#  TV  = torchvision model docs, `num_params` of the ImageNet weights (pytorch.org/vision/stable/models.html)
#  timm, HF = the reference implementations' model.num_parameters() / published model cards
PUBLISHED = {
    "resnet18": 11_689_512,  # TV ResNet18_Weights.IMAGENET1K_V1
    "resnet50": 25_557_032,  # TV ResNet50_Weights.IMAGENET1K_V1
    "vgg16": 138_357_544,  # TV VGG16_Weights.IMAGENET1K_V1
    "alexnet": 61_100_840,  # TV AlexNet_Weights.IMAGENET1K_V1
    "densenet121": 7_978_856,  # TV DenseNet121_Weights.IMAGENET1K_V1
    "squeezenet1_1": 1_235_496,  # TV SqueezeNet1_1_Weights.IMAGENET1K_V1
    "mobilenet_v2": 3_504_872,  # TV MobileNet_V2_Weights.IMAGENET1K_V1
    "mobilenet_v3_small": 2_542_856,  # TV MobileNet_V3_Small_Weights.IMAGENET1K_V1
    "mnasnet1_0": 4_383_312,  # TV MNASNet1_0_Weights.IMAGENET1K_V1
    "mobilenet_v3_large": 5_483_032,  # TV MobileNet_V3_Large_Weights.IMAGENET1K_V1
    "efficientnet_b0": 5_288_548,  # TV EfficientNet_B0_Weights.IMAGENET1K_V1
    "resnext50_32x4d": 25_028_904,  # TV ResNeXt50_32X4D_Weights.IMAGENET1K_V1
    "shufflenet_v2_x1_0": 2_278_604,  # TV ShuffleNet_V2_X1_0_Weights.IMAGENET1K_V1
    "regnet_y_400mf": 4_344_144,  # TV RegNet_Y_400MF_Weights.IMAGENET1K_V1
    "googlenet": 6_624_904,  # TV GoogLeNet_Weights.IMAGENET1K_V1 (the weights carry no auxiliary classifiers)
    # TV Inception_V3_Weights.IMAGENET1K_V1 lists 27,161,264 WITH the auxiliary classifier. The zoo builds the
    # inference graph (aux_logits=False): minus InceptionAux = conv0 (768*128 + 2*128) + conv1 (128*768*25 + 2*768)
    # + fc (768*1000 + 1000) = 3,326,696  ->  23,834,568.
    "inception_v3": 27_161_264 - 3_326_696,
    "vit_tiny": 5_717_416,  # timm vit_tiny_patch16_224 (5.7M in the timm results tables)
    # HF BertModel (bert-base-uncased) incl. the pooler (768*768 + 768 = 590,592); 108,891,648 without it.
    "bert_base": 109_482_240,
    # HF BertModel with the google/bert_uncased_L-2_H-128_A-2 config incl. pooler (hub page of prajjwal1/bert-tiny:
    # 4.39M params).
    "bert_tiny": 4_385_920,
    # The same count for the other miniatures: embeddings 31,038*H + 4 layers * (12*H^2 + 13*H) + pooler H^2 + H;
    # the hub pages of prajjwal1/bert-mini and prajjwal1/bert-small say 11.3M and 29.1M, which add the MLM head
    # (transform H^2 + H, LayerNorm 2H, output bias 30,522; decoder tied): 11,267,386 and 29,057,850.
    "bert_mini": 31_038 * 256 + 4 * (12 * 256**2 + 13 * 256) + 256**2 + 256,
    "bert_small": 31_038 * 512 + 4 * (12 * 512**2 + 13 * 512) + 512**2 + 512,
    "gpt2": 124_439_808,  # HF GPT2LMHeadModel "gpt2" (124M), LM head tied to wte (counted once)
    # Dai et al. 2017 Table 1 (M5, "0.5M"): convs k*c_in*c_out + c_out bias, BatchNorm 2*c_out, fc 512*10 + 10.
    "m5": sum(k * a * b + b + 2 * b for k, a, b in [(80, 1, 128), (3, 128, 128), (3, 128, 256), (3, 256, 512)])
    + 512 * 10 + 10,
    "r3d_18": 33_371_472,  # TV R3D_18_Weights.KINETICS400_V1
    "smollm_135m": 134_515_008,  # HF HuggingFaceTB/SmolLM-135M (LlamaForCausalLM, tied embeddings; "135M")
    # Gulati et al. 2020 Table 1 lists 10.3M for Conformer-S with its LSTM decoder; the zoo builds the encoder alone:
    # subsampling convs (1*144*9 + 144) + (144*144*9 + 144), Linear 144*19 -> 144, then 16 blocks of two
    # feed-forward modules (LayerNorm 2*144 + 144*576 + 576 + 576*144 + 144), attention (LayerNorm 288 + in_proj
    # 3*144*144 + 432 + out_proj 144*144 + 144), the convolution module (LayerNorm 288, pointwise 144*288 + 288,
    # depthwise 144*31 + 144, BatchNorm 288, pointwise 144*144 + 144) and a LayerNorm 288.
    "conformer_s": (1 * 144 * 9 + 144) + (144 * 144 * 9 + 144) + (144 * 19 * 144 + 144)
    + 16 * (2 * (288 + 144 * 576 + 576 + 576 * 144 + 144) + (288 + 3 * 144 * 144 + 432 + 144 * 144 + 144)
            + (288 + 144 * 288 + 288 + 144 * 31 + 144 + 288 + 144 * 144 + 144) + 288),
    "mlp": 669_706,  # Keras examples/mnist_mlp.py model.summary(): "Total params: 669,706"
}

REQUIRED = {"resnet18", "resnet50", "mobilenet_v2", "bert_tiny", "bert_base", "vgg16", "densenet121",
            "squeezenet1_1", "vit_tiny", "gpt2", "mlp"}


def test_zoo_has_the_required_networks():
    names = list_networks()
    assert REQUIRED <= set(names)
    assert {"mobilenet_v3_small", "mnasnet1_0", "alexnet"} & set(names)
    assert len(names) >= 12
    assert set(names) == set(PUBLISHED), "every zoo network needs a published count in this test"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_spec_fields(name):
    spec = get_network(name)
    assert spec.name == name
    assert spec.family in FAMILIES
    assert spec.description and spec.paper
    assert spec.published_params == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name):
    import torch

    with torch.device("meta"):  # shapes only: no memory, no init cost
        module, _ = get_network(name).build(1)
    assert count_params(module) == PUBLISHED[name]


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name, input_shapes, output_shapes", [
    ("mlp", [(784,)], [(10,)]),
    ("resnet18", [(3, 224, 224)], [(1000,)]),
    ("m5", [(1, 32_000)], [(10,)]),
    ("bert_tiny", [(128,)], [(128, 128), (128,)]),  # (last hidden state, pooled)
    ("r3d_18", [(3, 8, 112, 112)], [(400,)]),
    ("conformer_s", [(1000, 80)], [(249, 144)]),  # (1000 - 3) // 2 + 1 = 499 frames, then (499 - 3) // 2 + 1 = 249
])
def test_output_shapes(name, input_shapes, output_shapes, batch):
    import torch

    module, inputs = get_network(name).build(batch)
    assert not module.training
    assert [tuple(x.shape) for x in inputs] == [(batch, *s) for s in input_shapes]
    if name == "bert_tiny":
        assert inputs[0].dtype == torch.int64
    else:
        assert inputs[0].dtype == torch.float32
    with torch.no_grad():
        out = module(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert [tuple(o.shape) for o in outs] == [(batch, *s) for s in output_shapes]


def test_build_is_deterministic_and_keeps_global_rng():
    import torch

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1, x1 = get_network("mlp").build(1)
    after = torch.rand(1)
    m2, x2 = get_network("mlp").build(1)
    assert before == after
    assert torch.equal(x1[0], x2[0])
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_unknown_name():
    with pytest.raises(UnknownNameError, match="unknown network 'nope'") as err:
        get_network("nope")
    assert "resnet18" in str(err.value) and ".onnx" in str(err.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_bad_batch_size(bad):
    spec = get_network("mlp")
    with pytest.raises(PerfcastError, match="bad batch size") as err:
        spec.build(bad)
    assert "\n" not in str(err.value) and repr(bad) in str(err.value)
    with pytest.raises(PerfcastError, match="bad batch size"):
        spec.factory(bad)


def test_importing_the_zoo_does_not_import_torch():
    import os
    from pathlib import Path

    import perfcast

    root = str(Path(perfcast.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = ("import sys, perfcast; pre = 'torch' in sys.modules; import perfcast.networks as n; "
            "n.list_networks(); sys.exit(0 if pre or 'torch' not in sys.modules else 1)")
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


@pytest.mark.parametrize("name", ["mlp", "bert_tiny"])
def test_torch_to_relax(name):
    import tvm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = torch_to_relax(*get_network(name).build(1))
    assert isinstance(mod, tvm.IRModule)
    # torch.export's own deprecation of its tree specs is not shown to users (it printed on every `perfcast predict`)
    assert not [w for w in caught if "treespec" in str(w.message)]
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]


def test_llama_rmsnorm_and_rotary_match_independent_references():
    """SmolLM's RMSNorm equals torch's F.rms_norm; its rotate-half rotary embedding equals rotating each pair
    (x_i, x_{i + d/2}) by position * theta^(-2i/d) as a complex multiplication."""
    import torch

    from perfcast.networks.llama import SMOLLM_135M, Attention, RMSNorm, _rotate_half

    torch.manual_seed(0)
    x = torch.randn(2, 5, 576)
    norm = RMSNorm(576, 1e-5)
    torch.nn.init.normal_(norm.weight)
    assert torch.allclose(norm(x), torch.nn.functional.rms_norm(x, (576,), norm.weight, 1e-5), atol=1e-5)

    module, _ = get_network("smollm_135m").build(1)
    d, t = 64, 7
    q = torch.randn(t, d)
    rotated = q * module.cos[:t] + _rotate_half(q) * module.sin[:t]
    pos = torch.arange(t, dtype=torch.float64)[:, None]
    angle = pos * SMOLLM_135M.theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (t, d / 2)
    z = torch.complex(q[:, : d // 2].double(), q[:, d // 2:].double()) * torch.exp(1j * angle)
    assert torch.allclose(rotated.double(), torch.cat((z.real, z.imag), dim=-1), atol=1e-4)
    # grouped-query attention: 9 query heads share 3 key / value heads
    attn = module.layers[0].self_attn
    assert isinstance(attn, Attention) and (attn.heads, attn.kv_heads, attn.k_proj.out_features) == (9, 3, 192)


def test_conformer_attention_matches_torch_multihead_attention():
    """The Conformer's plain-matmul self-attention equals torch.nn.MultiheadAttention with the same weights."""
    import torch

    from perfcast.networks.conformer import SelfAttention

    torch.manual_seed(0)
    ours = SelfAttention(144, 4).eval()
    ref = torch.nn.MultiheadAttention(144, 4, batch_first=True).eval()
    ref.in_proj_weight.data.copy_(ours.in_proj.weight)
    ref.in_proj_bias.data.copy_(ours.in_proj.bias)
    ref.out_proj.weight.data.copy_(ours.out_proj.weight)
    ref.out_proj.bias.data.copy_(ours.out_proj.bias)
    x = torch.randn(2, 11, 144)
    with torch.no_grad():
        y = ours.norm(x)
        assert torch.allclose(ours(x), ref(y, y, y, need_weights=False)[0], atol=1e-5)
