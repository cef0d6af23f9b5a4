"""The wgmma zoo's generated CUDA source: instruction strings, operand numbering, input checks, and
(with nvcc) that every configuration builds to HGMMA/IGMMA without wgmma serialization."""

from __future__ import annotations

import re
import shutil

import pytest

from artifacts.kernels.wgmma_zoo import wgmma_zoo as zoo


@pytest.mark.parametrize("name, expected", [
    ("bf16-n8", "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;"),
    ("tf32-n64", "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"),
    ("s8-n64", "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8"),
    ("bf16-n64-nt", "p, 1, 1, 0, 1;"),
    ("bf16-n64-rs", "{%35, %36, %37, %38}, %33, p, 1, 1, 0;"),
])
def test_instruction_strings(name, expected):
    assert expected in zoo.CONFIGS[name].ptx()


def test_integer_and_tf32_forms_have_no_transpose_operands():
    assert zoo.CONFIGS["s8-n64"].ptx().endswith("%32, %33, p;")
    assert zoo.CONFIGS["tf32-n64"].ptx().endswith("%32, %33, p, 1, 1;")


@pytest.mark.parametrize("config", list(zoo.CONFIGS.values()), ids=lambda c: c.name)
def test_operand_numbers_match_the_asm_statement(config):
    """Every %n in the instruction is an operand the asm statement passes, and the scale flag is %regs+2."""
    text = zoo.render_kernel(config)
    block = text[text.index("asm volatile"):text.index(");", text.index("asm volatile"))]
    operands = block.count('"+f"') + block.count('"+r"') + block.count('"l"') + block.count('"r"')
    used = {int(n) for n in re.findall(r"%(\d+)", config.ptx())}
    assert max(used) < operands
    assert f"setp.ne.b32 p, %{config.n // 2 + 2}, 0" in text


@pytest.mark.parametrize("config, message", [
    (zoo.ZooConfig("x", "fp64", 64), "dtype 'fp64' not supported"),
    (zoo.ZooConfig("x", "bf16", 12), "N=12 not supported"),
    (zoo.ZooConfig("x", "bf16", 264), "N=264 not supported"),
    (zoo.ZooConfig("x", "s8", 40), "N=40 not supported for s8"),
    (zoo.ZooConfig("x", "tf32", 64, b_mn_major=True), "need a 16-bit type"),
    (zoo.ZooConfig("x", "bf16", 128, b_mn_major=True), "written for N=64"),
])
def test_can_implement_names_the_value(config, message):
    with pytest.raises(ValueError, match=message):
        zoo.render_kernel(config)


def test_build_refuses_targets_without_wgmma():
    with pytest.raises(ValueError, match="wgmma needs sm_90a"):
        zoo.build("sm_90")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_every_configuration_builds_to_tensor_core_sass():
    from kernelwiki.harness import compile as compile_mod

    built = zoo.build("sm_90a")
    assert zoo.serialization_warnings(built.ptxas_log) == []
    sass = compile_mod.disassemble(built.cubin)
    if sass is None:
        pytest.skip("nvdisasm not installed")
    by_kernel = zoo.sass_by_kernel(sass)
    for config in zoo.CONFIGS.values():
        assert config.sass_mnemonic() in by_kernel[config.kernel_name], config.name
