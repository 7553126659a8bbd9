// f16 conv_dgrad (transposed conv) stride 2, pad 1, 3x3: dy [4,64,14,14] NCHW, w [64,32,3,3] -> dx [4,32,28,28],
// as hipdnn-iree lowers it (scatter dy with stride 2, stride-1 NCHW conv with the flipped filter). docs/known_issues.md, issue 3.
func.func @main(%arg0: tensor<4x64x14x14xf16>, %arg1: tensor<64x32x3x3xf16>) -> tensor<4x32x28x28xf16> {
  %cst1 = arith.constant 0.0 : f16
  %empty2 = tensor.empty() : tensor<4x64x30x30xf16>
  %fill3 = linalg.fill ins(%cst1 : f16) outs(%empty2 : tensor<4x64x30x30xf16>) -> tensor<4x64x30x30xf16>
  %scatter4 = tensor.insert_slice %arg0 into %fill3[0, 0, 1, 1] [4, 64, 14, 14] [1, 1, 2, 2] : tensor<4x64x14x14xf16> into tensor<4x64x30x30xf16>
  %empty5 = tensor.empty() : tensor<32x64x3x3xf16>
  %g6 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%empty5 : tensor<32x64x3x3xf16>) {
  ^bb0(%a7: f16):
    %i8 = linalg.index 0 : index
    %i9 = linalg.index 1 : index
    %i10 = linalg.index 2 : index
    %i11 = linalg.index 3 : index
    %c12 = arith.constant 2 : index
    %v13 = arith.subi %c12, %i10 : index
    %c14 = arith.constant 2 : index
    %v15 = arith.subi %c14, %i11 : index
    %v16 = tensor.extract %arg1[%i9, %i8, %v13, %v15] : tensor<64x32x3x3xf16>
    linalg.yield %v16 : f16
  } -> tensor<32x64x3x3xf16>
  %cst17 = arith.constant 0.0 : f32
  %empty18 = tensor.empty() : tensor<4x32x28x28xf32>
  %fill19 = linalg.fill ins(%cst17 : f32) outs(%empty18 : tensor<4x32x28x28xf32>) -> tensor<4x32x28x28xf32>
  %conv20 = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%scatter4, %g6 : tensor<4x64x30x30xf16>, tensor<32x64x3x3xf16>) outs(%fill19 : tensor<4x32x28x28xf32>) -> tensor<4x32x28x28xf32>
  %empty21 = tensor.empty() : tensor<4x32x28x28xf16>
  %g22 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%conv20 : tensor<4x32x28x28xf32>) outs(%empty21 : tensor<4x32x28x28xf16>) {
  ^bb0(%a23: f32, %a24: f16):
    %v25 = arith.truncf %a23 : f32 to f16
    linalg.yield %v25 : f16
  } -> tensor<4x32x28x28xf16>
  return %g22 : tensor<4x32x28x28xf16>
}
