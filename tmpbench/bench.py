import sys, torch
sys.path.insert(0, "artifacts/kernels/fp8-blockscale-gemm")
import fp8_blockscale_gemm as K, quantize as Q
from kernelwiki.harness.timing import Timer
from kernelwiki.harness import gates
def blockwise(a, sfa, b, sfb):
    s = sfa.t().contiguous().t()
    return lambda: torch._scaled_mm(a, b.t(), scale_a=s, scale_b=sfb.t(), out_dtype=torch.bfloat16)
nks = [(2112,7168),(24576,1536),(32768,512),(7168,16384),(4096,7168),(7168,2048)]
timer = Timer(warmup=3, iters=15, flush_l2=True, order="shuffled")
for m in (4096,):
  for n,k in nks:
    x = torch.randn(m,k,device="cuda"); w = torch.randn(n,k,device="cuda")
    a,sfa = Q.per_token_cast(x); b,sfb = Q.per_block_cast(w)
    ref = Q.reference(a,sfa,b,sfb)
    cands = {"cublas": blockwise(a,sfa,b,sfb)}
    for tn, cl, en in ((192,(1,2),32),(192,(2,1),32),(192,(2,2),32),(192,(1,2),64),(128,(1,2),32)):
        run, d = K.compile_gemm(a,sfa,b,sfb, tile_n=tn, cluster_mn=cl, epi_n=en)
        gates.poison(d); run(); torch.cuda.synchronize()
        ok = gates.check(d.float(), ref, "bf16")["passed"]
        cands[f"{tn}/{cl[0]}{cl[1]}/e{en}{'' if ok else '-BAD'}"] = run
    del ref
    t = timer.compare(cands)
    fl = 2*m*n*k
    print(f"{m}x{n}x{k} pick={K.choose_tiling('normal',m,n,132)}", "  ".join(f"{kk}:{fl/v['median_ms']/1e9:.0f}" for kk,v in t.items()), "clk", t["cublas"]["sm_clock_mhz_after"], flush=True)
