"""The work model's FLOPs and minimum bytes, each against numbers worked out by hand.

Arguments are given the way the torch-ops recorder stores them: one shape per argument (None for a
non-tensor), dtype names without ``torch.``, the outputs' shapes, and the scalars by name.
"""

from __future__ import annotations

import json

import pytest

from gpuscope.analysis.roofline.work.model import Work, causal_pairs, op_work, op_work_json

BF, F32, F16, F64 = "bfloat16", "float32", "float16", "float64"


def test_mm_counts_two_flops_per_multiply_add_and_each_matrix_once() -> None:
    w = op_work("aten::mm", [[64, 128], [128, 32]], [F32, F32], [[64, 32]])
    assert w == Work("matmul", "fp32", 2 * 64 * 32 * 128, 2 * 64 * 32 * 128, (64 * 128 + 128 * 32 + 64 * 32) * 4)
    assert w is not None and w.by_precision() == {"fp32": 524288.0}


def test_addmm_adds_one_flop_per_output_for_the_bias() -> None:
    w = op_work("aten::addmm", [[32], [64, 128], [128, 32], None, None], [BF, BF, BF, None, None], [[64, 32]],
                {"beta": 1, "alpha": 1})
    assert w is not None
    assert w.matrix_flops == 524288 and w.flops == 524288 + 64 * 32
    assert w.bytes == (32 + 64 * 128 + 128 * 32 + 64 * 32) * 2
    assert w.precision == "bf16"


def test_bmm_and_baddbmm() -> None:
    w = op_work("aten::bmm", [[8, 16, 64], [8, 64, 32]], [F16, F16], [[8, 16, 32]])
    assert w is not None and w.flops == 2 * 8 * 16 * 32 * 64 and w.precision == "fp16"
    assert w.bytes == (8 * 16 * 64 + 8 * 64 * 32 + 8 * 16 * 32) * 2
    w = op_work("aten::baddbmm", [[8, 16, 32], [8, 16, 64], [8, 64, 32]], [F32] * 3, [[8, 16, 32]])
    assert w is not None and w.flops == 2 * 8 * 16 * 32 * 64 + 8 * 16 * 32


def test_scaled_mm_is_fp8_work_with_output_in_its_dtype() -> None:
    w = op_work("aten::_scaled_mm", [[256, 512], [512, 128], [], [], None, None],
                ["float8_e4m3fn", "float8_e4m3fn", F32, F32, None, None], [[256, 128]], {"out_dtype": BF})
    assert w is not None and w.precision == "fp8" and w.matrix_flops == 2 * 256 * 128 * 512
    # A and B one byte per element, the two scales 4 bytes each, the output written in bf16
    assert w.bytes == 256 * 512 + 512 * 128 + 4 + 4 + 256 * 128 * 1


def test_convolution_forward_with_bias() -> None:
    # 8 images, 64 -> 128 channels, 3x3 kernel, 56x56 output with padding 1
    shapes = [[8, 64, 56, 56], [128, 64, 3, 3], [128], None, None, None, None, None, None]
    scalars = {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "transposed": False,
               "output_padding": [0, 0], "groups": 1}
    w = op_work("aten::convolution", shapes, [BF, BF, BF] + [None] * 6, [[8, 128, 56, 56]], scalars)
    assert w is not None
    matrix = 2 * 8 * 56 * 56 * 128 * 64 * 3 * 3
    assert w.matrix_flops == matrix and w.flops == matrix + 8 * 128 * 56 * 56
    assert w.bytes == (8 * 64 * 56 * 56 + 128 * 64 * 9 + 128 + 8 * 128 * 56 * 56) * 2


def test_convolution_output_size_from_stride_when_outputs_are_missing() -> None:
    # 1x3x32x32, 16 filters of 5x5, stride 2, no padding: (32 - 5) // 2 + 1 = 14 per side
    scalars = {"stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "transposed": False, "groups": 1}
    w = op_work("aten::convolution", [[1, 3, 32, 32], [16, 3, 5, 5], None], [F32, F32, None], [], scalars)
    assert w is not None and w.flops == 2 * 14 * 14 * 16 * 3 * 5 * 5


def test_grouped_and_transposed_convolution() -> None:
    # depthwise: groups = channels, weight [32, 1, 3, 3]
    w = op_work("aten::convolution", [[2, 32, 10, 10], [32, 1, 3, 3], None], [F32, F32, None], [[2, 32, 10, 10]],
                {"groups": 32, "transposed": False})
    assert w is not None and w.flops == 2 * 2 * 10 * 10 * 32 * 9
    # transposed: weight [C_in=16, C_out/groups=8, 4, 4], every input position meets the whole weight
    w = op_work("aten::convolution", [[1, 16, 7, 7], [16, 8, 4, 4], [8]], [F32, F32, F32], [[1, 8, 16, 16]],
                {"transposed": True, "groups": 1})
    assert w is not None and w.matrix_flops == 2 * 7 * 7 * 16 * 8 * 16
    assert w.flops == w.matrix_flops + 8 * 16 * 16  # the bias per output element


def test_convolution_backward_counts_the_gradients_asked_for() -> None:
    shapes = [[8, 128, 56, 56], [8, 64, 56, 56], [128, 64, 3, 3], None, None, None, None, None, None, None, None]
    dtypes = [BF, BF, BF] + [None] * 8
    outs = [[8, 64, 56, 56], [128, 64, 3, 3], [128]]
    forward = 2 * 8 * 56 * 56 * 128 * 64 * 9
    w = op_work("aten::convolution_backward", shapes, dtypes, outs,
                {"bias_sizes": [128], "transposed": False, "groups": 1, "output_mask": [True, True, True]})
    assert w is not None and w.matrix_flops == 2 * forward and w.flops == 2 * forward + 8 * 128 * 56 * 56
    w = op_work("aten::convolution_backward", shapes, dtypes, [None, [128, 64, 3, 3], None],
                {"transposed": False, "groups": 1, "output_mask": [False, True, False]})
    assert w is not None and w.flops == forward  # the first layer: no input gradient, no bias


def test_flash_attention_forward_and_backward() -> None:
    q = [2, 4, 128, 64]  # batch, heads, length, head dim
    shapes = [q, q, q, None, None, None, None]
    pairs = 2 * 4 * 128 * 128
    w = op_work("aten::_scaled_dot_product_flash_attention", shapes, [BF] * 3 + [None] * 4, [q, [2, 4, 128]])
    assert w is not None and w.kind == "attention"
    assert w.matrix_flops == 4 * pairs * 64 and w.flops == 4 * pairs * 64 + 5 * pairs
    back = [q, q, q, q, q, [2, 4, 128]] + [None] * 9
    w = op_work("aten::_scaled_dot_product_flash_attention_backward", back, [BF] * 6 + [None] * 9, [q, q, q])
    assert w is not None and w.matrix_flops == 10 * pairs * 64  # 2.5 times the forward products


def test_causal_attention_counts_the_pairs_under_the_mask() -> None:
    assert causal_pairs(4, 4) == 1 + 2 + 3 + 4
    assert causal_pairs(6, 4) == 1 + 2 + 3 + 4 + 4 + 4
    q = [1, 2, 16, 8]
    w = op_work("aten::_scaled_dot_product_efficient_attention", [q, q, q, None], [F32] * 3 + [None], [q],
                {"is_causal": True})
    assert w is not None and w.matrix_flops == 2 * causal_pairs(16, 16) * (2 * 8 + 2 * 8)


def test_flash_kernels_own_operator_takes_batch_length_heads_layout() -> None:
    # _flash_attention_forward: [batch, length, heads, dim]; queries 100, keys 300, value dim 32
    q, k, v = [2, 100, 4, 64], [2, 300, 4, 64], [2, 300, 4, 32]
    w = op_work("aten::_flash_attention_forward", [q, k, v], [F16] * 3, [[2, 100, 4, 32]])
    assert w is not None and w.matrix_flops == 2 * 4 * 100 * 300 * (2 * 64 + 2 * 32)


def test_layer_norm_forward_and_backward() -> None:
    shapes = [[4, 10], None, [10], [10], None]
    w = op_work("aten::native_layer_norm", shapes, [F32, None, F32, F32, None], [[4, 10], [4, 1], [4, 1]],
                {"normalized_shape": [10], "eps": 1e-5})
    assert w is not None and w.flops == 40 * 7  # 5 per element, +1 weight, +1 bias
    assert w.bytes == (40 + 10 + 10) * 4 + (40 + 4 + 4) * 4
    back = [[4, 10], [4, 10], None, [4, 1], [4, 1], [10], [10], None]
    w = op_work("aten::native_layer_norm_backward", back, [F32, F32, None, F32, F32, F32, F32, None],
                [[4, 10], [10], [10]])
    assert w is not None and w.flops == 2 * 40 * 7


def test_rms_and_batch_norm() -> None:
    w = op_work("aten::_fused_rms_norm", [[8, 16], None, [16], None], [BF, None, BF, None], [[8, 16], [8, 1]])
    assert w is not None and w.flops == 128 * 4
    bn = [[2, 3, 4, 4], [3], [3], [3], [3], None, None, None]
    w = op_work("aten::native_batch_norm", bn, [F32] * 5 + [None] * 3, [[2, 3, 4, 4], [3], [3]], {"training": True})
    assert w is not None and w.flops == 96 * 7
    w = op_work("aten::native_batch_norm", bn, [F32] * 5 + [None] * 3, [[2, 3, 4, 4], [0], [0]], {"training": False})
    assert w is not None and w.flops == 96 * 4
    w = op_work("aten::_native_batch_norm_legit_no_training", bn, [F32] * 5 + [None] * 3, [[2, 3, 4, 4]])
    assert w is not None and w.flops == 96 * 4


def test_softmax_and_its_backward() -> None:
    w = op_work("aten::_softmax", [[32, 1000], None, None], [F32, None, None], [[32, 1000]], {"dim": -1})
    assert w is not None and w.flops == 32000 * 5 and w.bytes == 2 * 32000 * 4
    w = op_work("aten::_softmax_backward_data", [[32, 1000], [32, 1000], None, None], [F32, F32, None, None],
                [[32, 1000]])
    assert w is not None and w.flops == 32000 * 4 and w.bytes == 3 * 32000 * 4


def test_elementwise_broadcast_inplace_and_copies() -> None:
    w = op_work("aten::add", [[1000, 1000], [1000]], [F32, F32], [[1000, 1000]], {"alpha": 1})
    assert w is not None and w.flops == 1e6 and w.bytes == (1e6 + 1000 + 1e6) * 4
    w = op_work("aten::gelu", [[10, 10]], [BF], [[10, 10]])
    assert w is not None and w.flops == 500 and w.bytes == 2 * 100 * 2
    w = op_work("aten::mul_", [[10, 10], [10, 10]], [F32, F32], [[10, 10]])
    assert w is not None and w.flops == 100 and w.bytes == 3 * 100 * 4
    w = op_work("aten::copy_", [[10, 10], [10, 10], None], [BF, F32, None], [[10, 10]])
    assert w is not None and w.kind == "copy" and w.flops == 0
    assert w.bytes == 100 * 4 + 100 * 2  # reads the fp32 source, writes the bf16 destination
    w = op_work("aten::fill_", [[10, 10], None], [F32, None], [[10, 10]], {"value": 0})
    assert w is not None and w.bytes == 400  # written only
    w = op_work("aten::_to_copy", [[10, 10]], [F32], [[10, 10]], {"dtype": BF})
    assert w is not None and w.bytes == 400 + 200


def test_random_number_and_fill_operators_write_their_tensor_and_do_no_arithmetic() -> None:
    # a factory: the bytes of the tensor it makes, at the dtype it was given
    w = op_work("aten::randn", [None], [None], [[4096, 1024]], {"size": [4096, 1024], "dtype": BF})
    assert w == Work("random", "bf16", 0.0, 0.0, 4096 * 1024 * 2)
    w = op_work("aten::zeros", [None], [None], [[10]], {"size": [10]})  # the default dtype, float32
    assert w is not None and (w.kind, w.precision, w.flops, w.bytes) == ("fill", "fp32", 0, 40)
    # in place: the tensor it overwrites is written, not read
    w = op_work("aten::uniform_", [[2048, 1024], None, None], [BF, None, None], [[2048, 1024]], {"from": -1, "to": 1})
    assert w is not None and (w.kind, w.precision, w.flops, w.bytes) == ("random", "bf16", 0, 2048 * 1024 * 2)
    w = op_work("aten::bernoulli_", [[100], [100]], [F16, F32], [[100]])  # reads its probabilities
    assert w is not None and w.bytes == 100 * 4 + 100 * 2 and w.precision == "fp16"
    # a _like operator takes its input's shape and dtype, and reads nothing
    w = op_work("aten::ones_like", [[8, 8]], [F16], [[8, 8]], {"memory_format": "preserve_format"})
    assert w is not None and (w.kind, w.precision, w.bytes) == ("fill", "fp16", 8 * 8 * 2)


def test_foreach_operators_sum_their_tensor_lists() -> None:
    # in place on two tensors of 40 and 3 elements, with a scalar: returns nothing
    w = op_work("aten::_foreach_mul_", [[[4, 10], [3]], None], [[F32, F32], None], [], {"scalar": 0.9})
    assert w is not None and w.flops == 43 and w.bytes == 2 * 43 * 4


def test_fused_adamw_reads_four_lists_and_writes_three() -> None:
    p = [[100], [50]]
    w = op_work("aten::_fused_adamw_", [p, p, p, p, [], [[], []]] + [None] * 8,
                [[F32, F32]] * 4 + [[], [F32, F32]] + [None] * 8, [])
    assert w is not None and w.kind == "optimizer" and w.flops == 150 * 14
    assert w.bytes == (4 * 150 + 2) * 4 + 3 * 150 * 4  # two scalar steps read too


def test_reductions_and_max_of_two_tensors() -> None:
    w = op_work("aten::sum", [[64, 128], None, None], [F32, None, None], [[64]], {"dim": [1]})
    assert w is not None and w.kind == "reduction" and w.flops == 64 * 128 and w.bytes == (64 * 128 + 64) * 4
    w = op_work("aten::var_mean", [[64, 128]], [F32], [[64], [64]])
    assert w is not None and w.flops == 3 * 64 * 128
    w = op_work("aten::max", [[64, 128], [64, 128]], [F32, F32], [[64, 128]])
    assert w is not None and w.kind == "elementwise" and w.flops == 64 * 128


def test_embedding_forward_and_backward() -> None:
    w = op_work("aten::embedding", [[50000, 768], [8, 512], None, None, None], [F32, "int64", None, None, None],
                [[8, 512, 768]])
    assert w is not None and w.flops == 0
    assert w.bytes == 8 * 512 * 8 + 2 * 8 * 512 * 768 * 4  # indices, rows gathered, output written
    w = op_work("aten::embedding_dense_backward", [[8, 512, 768], [8, 512], None, None, None],
                [F32, "int64", None, None, None], [[50000, 768]], {"num_weights": 50000})
    assert w is not None and w.flops == 8 * 512 * 768
    assert w.bytes == (8 * 512 * 768) * 4 + 8 * 512 * 8 + 50000 * 768 * 4


def test_integer_work_has_bytes_but_no_flops() -> None:
    w = op_work("aten::add", [[100], [100]], ["int64", "int64"], [[100]])
    assert w is not None and w.precision is None and w.flops == 0 and w.bytes == 3 * 800
    assert w.by_precision() == {}


@pytest.mark.parametrize("name", ["aten::matmul", "aten::scaled_dot_product_attention", "aten::nonzero"])
def test_composite_and_unknown_operators_have_no_model(name: str) -> None:
    assert op_work(name, [[4, 4], [4, 4]], [F32, F32], [[4, 4]]) is None


def test_composites_seen_under_inference_mode_carry_their_decompositions_work() -> None:
    """Under torch.inference_mode() the recorder sees linear, layer_norm and batch_norm themselves
    (recorded so from a bf16 and an fp16 program): they carry the work of addmm and the native norms."""
    x = [8, 2048, 1024]
    w = op_work("aten::linear", [x, [1024, 1024], [1024]], [BF, BF, BF], [x])
    m = 8 * 2048
    assert w is not None and w.kind == "matmul" and w.matrix_flops == 2 * m * 1024 * 1024
    assert w.flops == 2 * m * 1024 * 1024 + m * 1024  # the bias: one add per output element
    assert w.bytes == (2 * m * 1024 + 1024 * 1024 + 1024) * 2
    assert op_work("aten::linear", [x, [1024, 1024], None], [BF, BF, None], [x]).flops == 2 * m * 1024 * 1024
    w = op_work("aten::layer_norm", [x, None, [1024], [1024]], [BF, None, BF, BF], [x],
                {"normalized_shape": [1024]})
    native = op_work("aten::native_layer_norm", [x, None, [1024], [1024]], [BF, None, BF, BF], [x])
    assert w is not None and w == native and w.flops == m * 1024 * 7
    shapes = [[256, 64, 56, 56], [64], [64], [64], [64], None, None, None, None]
    dtypes = [F16, F32, F32, F32, F32, None, None, None, None]
    w = op_work("aten::batch_norm", shapes, dtypes, [[256, 64, 56, 56]], {"training": False})
    assert w is not None and w.kind == "norm" and w.flops == 256 * 64 * 56 * 56 * 4  # inference: 4 per element


def test_malformed_arguments_give_no_model_rather_than_an_error() -> None:
    assert op_work("aten::mm", [[4, 4]], [F32], [[4, 4]]) is None
    assert op_work("aten::convolution", [[1, 3, 8, 8], [4]], [F32, F32], [[1, 4, 8, 8]]) is None


def test_json_form_equals_the_python_form() -> None:
    shapes, dtypes, outs = [[64, 128], [128, 32]], [F32, F32], [[64, 32]]
    assert op_work_json("aten::mm", json.dumps(shapes), json.dumps(dtypes), json.dumps(outs), "{}") == \
        op_work("aten::mm", shapes, dtypes, outs)
