"""The network zoo: architectures written in plain torch.nn (random init, nothing is downloaded).

`get_network(name).build(batch_size)` -> (module in eval mode, example inputs); `torch_to_relax(module, inputs)`
imports it into Relax. Importing this package does not import torch: each factory imports its family module
(`resnet.py`, `bert.py`, ...) on first call.

Parameter counts (`published_params`) are those of the paper / reference implementation that each family module
follows (see the `paper` field and tests/test_networks.py for sources).
"""

from __future__ import annotations

from .base import (FAMILIES, LazyFactory, NetworkSpec, check_batch_size, count_params, get_network, list_networks,
                   register)
from .to_relax import torch_to_relax

_TV = "torchvision.models reference implementation"


def _spec(name: str, family: str, module: str, description: str, paper: str, params: int) -> None:
    register(NetworkSpec(name=name, family=family, description=description, paper=paper, published_params=params,
                         factory=LazyFactory(module, name)))


_spec("resnet18", "cnn", "resnet", "ResNet-18, 224x224 RGB -> 1000 logits",
      f"He et al., Deep Residual Learning for Image Recognition, CVPR 2016; {_TV}", 11_689_512)
_spec("resnet50", "cnn", "resnet", "ResNet-50 (v1.5 bottleneck), 224x224 RGB -> 1000 logits",
      f"He et al., Deep Residual Learning for Image Recognition, CVPR 2016; {_TV}", 25_557_032)
_spec("vgg16", "cnn", "vgg", "VGG-16 (configuration D, no batch norm), 224x224 RGB -> 1000 logits",
      "Simonyan & Zisserman, Very Deep Convolutional Networks for Large-Scale Image Recognition, ICLR 2015; "
      f"{_TV}", 138_357_544)
_spec("alexnet", "cnn", "alexnet", "AlexNet (single-tower, 64-192-384-256-256), 224x224 RGB -> 1000 logits",
      "Krizhevsky et al., ImageNet Classification with Deep CNNs, NeurIPS 2012; Krizhevsky, One weird trick for "
      f"parallelizing CNNs, 2014; {_TV}", 61_100_840)
_spec("densenet121", "cnn", "densenet", "DenseNet-121 (k=32, blocks 6-12-24-16), 224x224 RGB -> 1000 logits",
      f"Huang et al., Densely Connected Convolutional Networks, CVPR 2017; {_TV}", 7_978_856)
_spec("squeezenet1_1", "cnn", "squeezenet", "SqueezeNet 1.1, 224x224 RGB -> 1000 logits",
      "Iandola et al., SqueezeNet: AlexNet-level accuracy with 50x fewer parameters, arXiv:1602.07360 (v1.1 from "
      f"github.com/forresti/SqueezeNet); {_TV}", 1_235_496)
_spec("inception_v3", "cnn", "inception", "Inception-v3 without the auxiliary classifier (inference graph), "
      "299x299 RGB -> 1000 logits",
      "Szegedy et al., Rethinking the Inception Architecture for Computer Vision, CVPR 2016; "
      f"{_TV} with aux_logits=False", 23_834_568)
_spec("googlenet", "cnn", "inception", "GoogLeNet (Inception v1 with batch norm) without the auxiliary classifiers "
      "(inference graph), 224x224 RGB -> 1000 logits",
      f"Szegedy et al., Going Deeper with Convolutions, CVPR 2015; {_TV} with aux_logits=False", 6_624_904)
_spec("mobilenet_v2", "mobile", "mobilenet", "MobileNetV2 (width 1.0), 224x224 RGB -> 1000 logits",
      f"Sandler et al., MobileNetV2: Inverted Residuals and Linear Bottlenecks, CVPR 2018; {_TV}", 3_504_872)
_spec("mobilenet_v3_small", "mobile", "mobilenet", "MobileNetV3-Small (width 1.0), 224x224 RGB -> 1000 logits",
      f"Howard et al., Searching for MobileNetV3, ICCV 2019; {_TV}", 2_542_856)
_spec("mnasnet1_0", "mobile", "mobilenet", "MnasNet 1.0 (torchvision variant, no SE), 224x224 RGB -> 1000 logits",
      f"Tan et al., MnasNet: Platform-Aware Neural Architecture Search for Mobile, CVPR 2019; {_TV}", 4_383_312)
_spec("mobilenet_v3_large", "mobile", "mobilenet", "MobileNetV3-Large (width 1.0), 224x224 RGB -> 1000 logits",
      f"Howard et al., Searching for MobileNetV3, ICCV 2019; {_TV}", 5_483_032)
_spec("efficientnet_b0", "mobile", "mobilenet", "EfficientNet-B0 (MBConv + squeeze-excitation, SiLU), 224x224 RGB "
      "-> 1000 logits",
      f"Tan & Le, EfficientNet: Rethinking Model Scaling for CNNs, ICML 2019; {_TV}", 5_288_548)
_spec("resnext50_32x4d", "cnn", "resnet", "ResNeXt-50 32x4d (grouped 3x3 convs in ResNet-50's bottlenecks), "
      "224x224 RGB -> 1000 logits",
      f"Xie et al., Aggregated Residual Transformations for Deep Neural Networks, CVPR 2017; {_TV}", 25_028_904)
_spec("shufflenet_v2_x1_0", "mobile", "shufflenet", "ShuffleNet V2 1.0x (channel split and shuffle), 224x224 RGB "
      "-> 1000 logits",
      f"Ma et al., ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture Design, ECCV 2018; {_TV}",
      2_278_604)
_spec("regnet_y_400mf", "cnn", "regnet", "RegNetY-400MF (grouped 3x3 bottlenecks, group width 8, "
      "squeeze-excitation), 224x224 RGB -> 1000 logits",
      f"Radosavovic et al., Designing Network Design Spaces, CVPR 2020; {_TV}", 4_344_144)
_spec("m5", "cnn", "m5", "M5 1-D CNN on raw audio (conv 80/4 then 3-wide, 128-128-256-512, max-pool 4), "
      "(batch, 1, 32000) waveform -> 10 logits",
      "Dai et al., Very Deep Convolutional Neural Networks for Raw Waveforms, ICASSP 2017 (Table 1, M5)", 559_114)
_spec("vit_tiny", "transformer", "vit", "ViT-Ti/16 (dim 192, depth 12, 3 heads, MLP 768), 224x224 RGB -> 1000 "
      "logits",
      "Dosovitskiy et al., An Image is Worth 16x16 Words, ICLR 2021; Touvron et al., DeiT, ICML 2021; "
      "timm vit_tiny_patch16_224", 5_717_416)


_spec("r3d_18", "cnn", "video", "R3D-18 (3-D ResNet-18, 3x3x3 convolutions, BatchNorm3d), an 8-frame 112x112 RGB "
      "clip -> 400 Kinetics logits",
      "Tran et al., A Closer Look at Spatiotemporal Convolutions for Action Recognition, CVPR 2018; "
      "torchvision.models.video.r3d_18 (R3D_18_Weights.KINETICS400_V1)", 33_371_472)
_spec("conformer_s", "transformer", "conformer", "Conformer-S encoder (16 blocks, dim 144, 4 heads, depthwise "
      "Conv1d kernel 31, GLU, SiLU, conv subsampling), (batch, 1000, 80) log-mel frames -> (batch, 249, 144)",
      "Gulati et al., Conformer: Convolution-augmented Transformer for Speech Recognition, Interspeech 2020 "
      "(Table 1, Conformer-S; encoder only, counted by hand in tests/test_networks.py); torchaudio.models.Conformer",
      8_353_728)


def _bert_miniature(name: str, layers: int, hidden: int, params: int) -> None:
    """A BERT miniature of Turc et al. (head size 64, intermediate 4 x hidden), as HF BertModel."""
    heads = hidden // 64
    _spec(name, "transformer", "bert", f"BERT-{name.removeprefix('bert_').title()} encoder + "
          f"pooler ({layers} layers, {hidden} hidden, {heads} heads, {4 * hidden} intermediate), int64 "
          "token ids (batch, 128) -> (hidden states, pooled)",
          "Turc et al., Well-Read Students Learn Better, arXiv:1908.08962 "
          f"(google/bert_uncased_L-{layers}_H-{hidden}_A-{heads}); HF BertModel", params)


_bert_miniature("bert_tiny", 2, 128, 4_385_920)
_bert_miniature("bert_mini", 4, 256, 11_170_560)
_bert_miniature("bert_small", 4, 512, 28_763_648)
_spec("bert_base", "transformer", "bert", "BERT-Base encoder + pooler (12 layers, 768 hidden, 12 heads, 3072 "
      "intermediate), int64 token ids (batch, 128) -> (hidden states, pooled)",
      "Devlin et al., BERT: Pre-training of Deep Bidirectional Transformers, NAACL 2019; HF BertModel "
      "(bert-base-uncased)", 109_482_240)
_spec("gpt2", "transformer", "gpt2", "GPT-2 small decoder with tied LM head (12 layers, 768 wide, 12 heads, "
      "causal), int64 token ids (batch, 128) -> logits (batch, 128, 50257)",
      "Radford et al., Language Models are Unsupervised Multitask Learners, 2019; HF GPT2LMHeadModel (gpt2)",
      124_439_808)
_spec("smollm_135m", "transformer", "llama", "SmolLM-135M, a Llama-architecture decoder with tied LM head (30 "
      "layers, 576 wide, 9 query / 3 key-value heads, RMSNorm, rotary embeddings, SiLU-gated MLP 1536), int64 "
      "token ids (batch, 128) -> logits (batch, 128, 49152)",
      "Touvron et al., LLaMA: Open and Efficient Foundation Language Models, arXiv:2302.13971, 2023; HF "
      "LlamaForCausalLM (HuggingFaceTB/SmolLM-135M)", 134_515_008)
_spec("mlp", "mlp", "mlp", "MLP 784-512-512-10 with ReLU (MNIST), float32 (batch, 784) -> 10 logits",
      "Keras example mnist_mlp.py (keras-team/keras)", 669_706)

__all__ = ["FAMILIES", "LazyFactory", "NetworkSpec", "check_batch_size", "count_params", "get_network",
           "list_networks", "register", "torch_to_relax"]
