// A reader and a writer of hipDNN graph FlatBuffers built only on the C++ code flatc generates from
// schemas/graph.fbs (tests/test_kind1.py and tests/test_hipdnn_graph.py compile it). "read FILE" verifies
// the buffer and prints one line per graph, tensor and node (its compute type; for RMSNorm/layernorm
// the phase and operands, for SDPA how the scale is given); "write FILE" builds a two-node graph with the generated
// builders: D = relu(A[4x8] . B[8x5], upper clip 0.5), uids A 0, B 1, C 2 (virtual), D 3.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "graph_generated.h"

namespace fb = hipdnn_flatbuffers_sdk::data_objects;

static std::string join(const flatbuffers::Vector<int64_t>* v) {
    std::string out;
    if (v == nullptr) return out;
    for (flatbuffers::uoffset_t i = 0; i < v->size(); ++i) out += (i ? "," : "") + std::to_string(v->Get(i));
    return out;
}

static int read_graph(const char* path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    flatbuffers::Verifier verifier(buf.data(), buf.size());
    if (!fb::VerifyGraphBuffer(verifier)) {
        std::printf("verify failed\n");
        return 3;
    }
    const fb::Graph* g = fb::GetGraph(buf.data());
    std::printf("graph %s io=%d compute=%d tensors=%u nodes=%u\n", g->name() ? g->name()->c_str() : "",
                static_cast<int>(g->io_data_type()), static_cast<int>(g->compute_data_type()),
                g->tensors() ? g->tensors()->size() : 0u, g->nodes() ? g->nodes()->size() : 0u);
    if (g->tensors() != nullptr) {
        for (const fb::TensorAttributes* t : *g->tensors()) {
            std::printf("tensor uid=%lld name=%s dtype=%d dims=%s strides=%s virtual=%d", static_cast<long long>(t->uid()),
                        t->name() ? t->name()->c_str() : "", static_cast<int>(t->data_type()), join(t->dims()).c_str(),
                        join(t->strides()).c_str(), t->virtual_() ? 1 : 0);
            if (t->value_type() == fb::TensorValue_Float32Value) std::printf(" value=%g", t->value_as_Float32Value()->value());
            std::printf("\n");
        }
    }
    if (g->nodes() != nullptr) {
        for (const fb::Node* n : *g->nodes()) {
            std::printf("node %s compute=%d type=%d", n->name() ? n->name()->c_str() : "",
                        static_cast<int>(n->compute_data_type()), static_cast<int>(n->attributes_type()));
            if (const fb::MatmulAttributes* m = n->attributes_as_MatmulAttributes()) {
                std::printf(" matmul a=%lld b=%lld c=%lld", static_cast<long long>(m->a_tensor_uid()),
                            static_cast<long long>(m->b_tensor_uid()), static_cast<long long>(m->c_tensor_uid()));
            } else if (const fb::PointwiseAttributes* p = n->attributes_as_PointwiseAttributes()) {
                std::printf(" pointwise op=%d in0=%lld out0=%lld", static_cast<int>(p->operation()),
                            static_cast<long long>(p->in_0_tensor_uid()), static_cast<long long>(p->out_0_tensor_uid()));
                if (p->in_1_tensor_uid().has_value()) std::printf(" in1=%lld", static_cast<long long>(*p->in_1_tensor_uid()));
                if (p->relu_upper_clip().has_value()) std::printf(" upper_clip=%g", *p->relu_upper_clip());
            } else if (const fb::RMSNormAttributes* r = n->attributes_as_RMSNormAttributes()) {
                std::printf(" rmsnorm phase=%d x=%lld scale=%lld eps=%lld", static_cast<int>(r->forward_phase()),
                            static_cast<long long>(r->x_tensor_uid()), static_cast<long long>(r->scale_tensor_uid()),
                            static_cast<long long>(r->epsilon_tensor_uid()));
            } else if (const fb::LayernormAttributes* l = n->attributes_as_LayernormAttributes()) {
                std::printf(" layernorm phase=%d scale=%lld eps=%lld", static_cast<int>(l->forward_phase()),
                            static_cast<long long>(l->scale_tensor_uid()), static_cast<long long>(l->epsilon_tensor_uid()));
            } else if (const fb::SdpaAttributes* a = n->attributes_as_SdpaAttributes()) {
                std::printf(" sdpa");
                if (a->scale_tensor_uid().has_value()) std::printf(" scale_tensor=%lld", static_cast<long long>(*a->scale_tensor_uid()));
                if (a->attn_scale_value().has_value()) std::printf(" attn_scale=%g", *a->attn_scale_value());
            }
            std::printf("\n");
        }
    }
    return 0;
}

static int write_graph(const char* path) {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::TensorAttributes>> tensors;
    auto tensor = [&](int64_t uid, const char* name, std::vector<int64_t> dims, std::vector<int64_t> strides, bool virt) {
        tensors.push_back(fb::CreateTensorAttributesDirect(b, uid, name, fb::DataType_FLOAT, &strides, &dims, virt));
    };
    tensor(0, "A", {4, 8}, {8, 1}, false);
    tensor(1, "B", {8, 5}, {5, 1}, false);
    tensor(2, "C", {4, 5}, {5, 1}, true);
    tensor(3, "D", {4, 5}, {5, 1}, false);
    auto mm = fb::CreateMatmulAttributes(b, 0, 1, 2);
    fb::PointwiseAttributesBuilder pw(b);
    pw.add_operation(fb::PointwiseMode_RELU_FWD);
    pw.add_relu_upper_clip(0.5f);
    pw.add_in_0_tensor_uid(2);
    pw.add_out_0_tensor_uid(3);
    auto relu = pw.Finish();
    std::vector<flatbuffers::Offset<fb::Node>> nodes = {
        fb::CreateNodeDirect(b, "mm", fb::DataType_FLOAT, fb::NodeAttributes_MatmulAttributes, mm.Union()),
        fb::CreateNodeDirect(b, "relu", fb::DataType_FLOAT, fb::NodeAttributes_PointwiseAttributes, relu.Union())};
    b.Finish(fb::CreateGraphDirect(b, "cpp_written", fb::DataType_FLOAT, fb::DataType_FLOAT, fb::DataType_FLOAT,
                                   &tensors, &nodes));
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.GetBufferPointer()), static_cast<std::streamsize>(b.GetSize()));
    return out ? 0 : 4;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    std::string mode = argv[1];
    if (mode == "read") return read_graph(argv[2]);
    if (mode == "write") return write_graph(argv[2]);
    return 2;
}
