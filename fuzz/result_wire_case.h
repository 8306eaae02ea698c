/* The built-in case of fuzz_result_wire and of its seed writer (make_result_wire_seeds.c):
 * a small CNN whose BatchNorm updates its statistics again when recomputed, so its result
 * holds a mismatch. */
#ifndef CK_FUZZ_RESULT_WIRE_CASE_H
#define CK_FUZZ_RESULT_WIRE_CASE_H

static const char case_json[] =
    "{\"name\": \"fuzz_cnn\", \"seed\": 42, \"input\": {\"shape\": [4, 3, 8, 8]},"
    " \"layers\": [{\"name\": \"conv1\", \"op\": \"conv2d\", \"filters\": 4, \"kernel\": 3,"
    " \"padding\": \"same\"}, {\"name\": \"bn1\", \"op\": \"batchnorm\"},"
    " {\"name\": \"relu1\", \"op\": \"relu\"}, {\"name\": \"pool1\", \"op\": \"maxpool2d\","
    " \"pool\": 2}, {\"name\": \"flat\", \"op\": \"flatten\"}, {\"name\": \"fc\", \"op\":"
    " \"linear\", \"units\": 5}], \"loss\": {\"op\": \"cross_entropy\"},"
    " \"checkpoint\": {\"segments\": [[\"conv1\", \"pool1\"]]},"
    " \"train\": {\"steps\": 1, \"optimizer\": \"sgd\", \"lr\": 0.01},"
    " \"policies\": {\"batchnorm_recompute\": \"update\"}, \"expect\": \"mismatch\"}";

#endif
