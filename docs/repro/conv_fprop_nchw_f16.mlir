// f16 conv 3x3 pad 1, 32 -> 64 channels, 16x16: NHWC input/filter/output, computed as linalg.conv_2d_nchw_fchw
// between transposes (how hipdnn-iree lowers a channels-last conv_fprop). docs/known_issues.md, issue 2.
func.func @main(%arg0: tensor<1x16x16x32xf16>, %arg1: tensor<64x3x3x32xf16>) -> tensor<1x16x16x64xf16> {
  %empty1 = tensor.empty() : tensor<1x32x16x16xf16>
  %t2 = linalg.transpose ins(%arg0 : tensor<1x16x16x32xf16>) outs(%empty1 : tensor<1x32x16x16xf16>) permutation = [0, 3, 1, 2]
  %empty3 = tensor.empty() : tensor<64x32x3x3xf16>
  %t4 = linalg.transpose ins(%arg1 : tensor<64x3x3x32xf16>) outs(%empty3 : tensor<64x32x3x3xf16>) permutation = [0, 3, 1, 2]
  %cst5 = arith.constant 0.0 : f16
  %pad6 = tensor.pad %t2 low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%i7: index, %i8: index, %i9: index, %i10: index):
    tensor.yield %cst5 : f16
  } : tensor<1x32x16x16xf16> to tensor<1x32x18x18xf16>
  %cst11 = arith.constant 0.0 : f32
  %empty12 = tensor.empty() : tensor<1x64x16x16xf32>
  %fill13 = linalg.fill ins(%cst11 : f32) outs(%empty12 : tensor<1x64x16x16xf32>) -> tensor<1x64x16x16xf32>
  %conv14 = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%pad6, %t4 : tensor<1x32x18x18xf16>, tensor<64x32x3x3xf16>) outs(%fill13 : tensor<1x64x16x16xf32>) -> tensor<1x64x16x16xf32>
  %empty15 = tensor.empty() : tensor<1x64x16x16xf16>
  %g16 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%conv14 : tensor<1x64x16x16xf32>) outs(%empty15 : tensor<1x64x16x16xf16>) {
  ^bb0(%a17: f32, %a18: f16):
    %v19 = arith.truncf %a17 : f32 to f16
    linalg.yield %v19 : f16
  } -> tensor<1x64x16x16xf16>
  %empty20 = tensor.empty() : tensor<1x16x16x64xf16>
  %t21 = linalg.transpose ins(%g16 : tensor<1x64x16x16xf16>) outs(%empty20 : tensor<1x16x16x64xf16>) permutation = [0, 2, 3, 1]
  return %t21 : tensor<1x16x16x64xf16>
}
