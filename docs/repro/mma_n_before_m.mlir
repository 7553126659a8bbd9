// IREE 3.13, CUDA (sm_80 PTX on an H200): an f16 contraction whose N dimension (d0, from the second
// operand %w) comes before its M dimension (d1, from the first operand %x) in the loop order.
//   y[n, m] = sum_k x[m, k] * w[n, k]          (f16 inputs, f32 accumulation and result)
// IREE makes this form itself when it moves a transpose into a matmul (docs/known_issues.md, issue 1).
// Expected: y == (x @ w.T).T. Obtained: in every 16x16 tile, y[r, 2t+1] and y[r+8, 2t] (r < 8) trade
// places (the mma.sync m16n8k16 accumulator registers c1 and c2): half of the output is wrong.
func.func @main(%x: tensor<16x16xf16>, %w: tensor<16x16xf16>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %y = linalg.generic {
      indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>,   // x[m, k]
                       affine_map<(d0, d1, d2) -> (d0, d2)>,   // w[n, k]
                       affine_map<(d0, d1, d2) -> (d0, d1)>],  // y[n, m]
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : tensor<16x16xf16>, tensor<16x16xf16>) outs(%acc : tensor<16x16xf32>) {
  ^bb0(%a: f16, %b: f16, %o: f32):
    %a32 = arith.extf %a : f16 to f32
    %b32 = arith.extf %b : f16 to f32
    %p = arith.mulf %a32, %b32 : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<16x16xf32>
  return %y : tensor<16x16xf32>
}
