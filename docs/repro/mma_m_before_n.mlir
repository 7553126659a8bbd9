// Control for mma_n_before_m.mlir: the same product with M (d0, from %x) before N (d1, from %w):
//   y[m, n] = sum_k x[m, k] * w[n, k]  -- right on the same GPU; its transpose is what the other file wants.
func.func @main(%x: tensor<16x16xf16>, %w: tensor<16x16xf16>) -> tensor<16x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %y = linalg.generic {
      indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>,   // x[m, k]
                       affine_map<(d0, d1, d2) -> (d1, d2)>,   // w[n, k]
                       affine_map<(d0, d1, d2) -> (d0, d1)>],  // y[m, n]
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
