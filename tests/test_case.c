/*
 * Case-file parser tests: one row per class of bad case file (each must give CK_ERR_INPUT
 * and one line that starts with the file and names the JSON path), the documented
 * example and defaults, file loading, the op catalogue, and truncated/mutated input.
 *
 * Case texts are written with single quotes for readability; q() turns them into JSON.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/model/case.h"
#include "harness/model/graph.h"
#include "harness/model/op_def.h"

#define CASE_PATH "t/case.json"

/* Single quotes -> double quotes (case texts below never need an apostrophe). */
static char *q(const char *squoted)
{
    char *s = strdup(squoted);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* A valid prefix: name and a 4-D input; rows add layers and whatever else they test. */
#define HEAD "{'name': 't', 'input': {'shape': [2, 3, 8, 8]}, "
#define CONV(opts) "'layers': [{'name': 'a', 'op': 'conv2d', " opts "}]}"
#define ONE_LAYER "'layers': [{'name': 'a', 'op': 'relu'}]"

typedef enum { AT_PARSE, AT_GRAPH } stage;

typedef struct {
    const char *desc;
    const char *text;     /* single-quoted JSON */
    const char *fragment; /* must appear in the message after "t/case.json: " */
    stage at;
} bad_row;

static const bad_row bad_rows[] = {
    /* syntax and document */
    {"malformed JSON", "{'name': 't',", "line 1, column", AT_PARSE},
    {"malformed JSON on a later line", "{\n 'name': 't',\n 'seed': ]\n}", "line 3, column 10",
     AT_PARSE},
    {"empty file", "", "empty file", AT_PARSE},
    {"whitespace only", " \n\t ", "empty file", AT_PARSE},
    {"text after the value", HEAD ONE_LAYER "} x", "unexpected text after the JSON value",
     AT_PARSE},
    {"two documents", "{} {}", "line 1, column 4: unexpected text", AT_PARSE},
    {"top level is a list", "[1, 2]", "top level: must be an object, got a list", AT_PARSE},
    {"duplicate top-level key", HEAD "'name': 'u', " ONE_LAYER "}", "name: duplicate key",
     AT_PARSE},
    {"duplicate layer key", HEAD CONV("'filters': 4, 'kernel': 3, 'kernel': 5"),
     "layers[0].kernel: duplicate key", AT_PARSE},
    {"duplicate key in a nested object", HEAD ONE_LAYER ", 'train': {'lr': 0.1, 'lr': 0.2}}",
     "train.lr: duplicate key", AT_PARSE},
    /* unknown things */
    {"unknown top-level key", HEAD ONE_LAYER ", 'nmae': 'x'}", "nmae: unknown key (allowed: name,",
     AT_PARSE},
    {"unknown layer key", HEAD CONV("'filters': 4, 'kernal': 3"),
     "layers[0] (a).kernal: unknown key for conv2d (allowed: name, op, inputs, filters, kernel, "
     "stride, padding, dilation, bias, init, share)",
     AT_PARSE},
    {"option of another op", HEAD "'layers': [{'name': 'a', 'op': 'relu', 'rate': 0.5}]}",
     "layers[0] (a).rate: unknown key for relu", AT_PARSE},
    {"unknown op", HEAD "'layers': [{'name': 'a', 'op': 'conv4d'}]}",
     "layers[0] (a).op: unknown op \"conv4d\" (known: linear, conv1d", AT_PARSE},
    {"unknown input key", "{'name': 't', 'input': {'shape': [2, 3], 'dtype': 'f32'}, " ONE_LAYER "}",
     "input.dtype: unknown key (allowed: shape, dist, vocab)", AT_PARSE},
    {"unknown train key", HEAD ONE_LAYER ", 'train': {'step': 2}}", "train.step: unknown key",
     AT_PARSE},
    {"unknown policies key", HEAD ONE_LAYER ", 'policies': {'bn': 'skip'}}",
     "policies.bn: unknown key", AT_PARSE},
    {"unknown tolerance key", HEAD ONE_LAYER ", 'tolerance': {'eps': 1}}",
     "tolerance.eps: unknown key", AT_PARSE},
    {"unknown loss key", HEAD ONE_LAYER ", 'loss': {'op': 'mean', 'reduction': 'sum'}}",
     "loss.reduction: unknown key", AT_PARSE},
    {"unknown checkpoint key", HEAD ONE_LAYER ", 'checkpoint': {'segment': []}}",
     "checkpoint.segment: unknown key", AT_PARSE},
    /* missing things */
    {"missing name", "{'input': {'shape': [2, 3]}, " ONE_LAYER "}", "name: required", AT_PARSE},
    {"missing input", "{'name': 't', " ONE_LAYER "}", "input: required", AT_PARSE},
    {"missing input shape", "{'name': 't', 'input': {}, " ONE_LAYER "}", "input.shape: required",
     AT_PARSE},
    {"missing layers", "{'name': 't', 'input': {'shape': [2, 3]}}", "layers: required", AT_PARSE},
    {"empty layers", HEAD "'layers': []}", "layers: must hold at least one layer", AT_PARSE},
    {"layer without name", HEAD "'layers': [{'op': 'relu'}]}", "layers[0].name: required",
     AT_PARSE},
    {"layer without op", HEAD "'layers': [{'name': 'a'}]}", "layers[0] (a).op: required",
     AT_PARSE},
    {"conv without kernel", HEAD CONV("'filters': 4"), "layers[0] (a).kernel: required for conv2d",
     AT_PARSE},
    {"noise without stddev", HEAD "'layers': [{'name': 'a', 'op': 'gaussian_noise'}]}",
     "layers[0] (a).stddev: required for gaussian_noise", AT_PARSE},
    {"loss without op", HEAD ONE_LAYER ", 'loss': {}}", "loss.op: required", AT_PARSE},
    /* wrong types */
    {"name not a string", "{'name': 3, 'input': {'shape': [2, 3]}, " ONE_LAYER "}",
     "name: must be a string, got a number", AT_PARSE},
    {"kernel as a string", HEAD CONV("'filters': 4, 'kernel': '3'"),
     "layers[0] (a).kernel: must be an integer or a list of 2 integers, got a string", AT_PARSE},
    {"filters as a string", HEAD CONV("'filters': '4', 'kernel': 3"),
     "layers[0] (a).filters: must be a positive integer, got a string", AT_PARSE},
    {"bias as a number", HEAD CONV("'filters': 4, 'kernel': 3, 'bias': 0"),
     "layers[0] (a).bias: must be true or false, got a number", AT_PARSE},
    {"momentum as a string", HEAD "'layers': [{'name': 'a', 'op': 'batchnorm', 'momentum': 'x'}]}",
     "layers[0] (a).momentum: must be a number in [0, 1], got a string", AT_PARSE},
    {"layers not a list", HEAD "'layers': {'a': 1}}", "layers: must be a list of layers, got an object",
     AT_PARSE},
    {"layer not an object", HEAD "'layers': [3]}", "layers[0]: must be an object, got a number",
     AT_PARSE},
    {"input shape not a list", "{'name': 't', 'input': {'shape': 4}, " ONE_LAYER "}",
     "input.shape: must be a list", AT_PARSE},
    {"input not an object", "{'name': 't', 'input': [2, 3], " ONE_LAYER "}",
     "input: must be an object, got a list", AT_PARSE},
    {"loss not an object", HEAD ONE_LAYER ", 'loss': 'mse'}", "loss: must be an object, got a string",
     AT_PARSE},
    {"seed as a string", HEAD ONE_LAYER ", 'seed': '1'}", "seed: must be a non-negative integer, got a string",
     AT_PARSE},
    {"seed null", HEAD ONE_LAYER ", 'seed': null}", "seed: must be a non-negative integer, got null",
     AT_PARSE},
    {"expect as a bool", HEAD ONE_LAYER ", 'expect': true}", "expect: must be one of identical, close, mismatch, any, got true",
     AT_PARSE},
    /* sizes and ranges */
    {"negative kernel", HEAD CONV("'filters': 4, 'kernel': -1"),
     "layers[0] (a).kernel: must be a positive integer, got -1", AT_PARSE},
    {"zero filters", HEAD CONV("'filters': 0, 'kernel': 3"),
     "layers[0] (a).filters: must be a positive integer, got 0", AT_PARSE},
    {"non-integer kernel", HEAD CONV("'filters': 4, 'kernel': 2.5"),
     "layers[0] (a).kernel: must be a positive integer, got 2.5", AT_PARSE},
    {"huge filters", HEAD CONV("'filters': 1e300, 'kernel': 3"),
     "layers[0] (a).filters: must be at most 1048576, got 1e+300", AT_PARSE},
    {"filters beyond a double", HEAD CONV("'filters': 1e400, 'kernel': 3"),
     "layers[0] (a).filters: must be a positive integer, got a number too large for a double",
     AT_PARSE},
    {"stride over the cap", HEAD CONV("'filters': 4, 'kernel': 3, 'stride': 1048577"),
     "layers[0] (a).stride: must be at most 1048576, got 1048577", AT_PARSE},
    {"kernel list of the wrong length", HEAD CONV("'filters': 4, 'kernel': [3, 3, 3]"),
     "layers[0] (a).kernel: must be an integer or a list of 2 integers (one per spatial dim), got "
     "a list of 3",
     AT_PARSE},
    {"negative entry in a kernel list", HEAD CONV("'filters': 4, 'kernel': [3, -3]"),
     "layers[0] (a).kernel[1]: must be a positive integer, got -3", AT_PARSE},
    {"negative padding", HEAD CONV("'filters': 4, 'kernel': 3, 'padding': -1"),
     "layers[0] (a).padding: must be a non-negative integer, got -1", AT_PARSE},
    {"unknown padding mode", HEAD CONV("'filters': 4, 'kernel': 3, 'padding': 'full'"),
     "layers[0] (a).padding: must be \"same\", \"valid\", an integer or a list of 2 integers, got "
     "\"full\"",
     AT_PARSE},
    {"zero dilation", HEAD CONV("'filters': 4, 'kernel': 3, 'dilation': 0"),
     "layers[0] (a).dilation: must be a positive integer, got 0", AT_PARSE},
    {"zero input dim", "{'name': 't', 'input': {'shape': [2, 0]}, " ONE_LAYER "}",
     "input.shape[1]: must be a positive integer, got 0", AT_PARSE},
    {"fractional input dim", "{'name': 't', 'input': {'shape': [2, 1.5]}, " ONE_LAYER "}",
     "input.shape[1]: must be a positive integer, got 1.5", AT_PARSE},
    {"rank-1 input", "{'name': 't', 'input': {'shape': [2]}, " ONE_LAYER "}",
     "input.shape: must have 2 to 8 dimensions (N first), got 1", AT_PARSE},
    {"rank-9 input", "{'name': 't', 'input': {'shape': [1,1,1,1,1,1,1,1,1]}, " ONE_LAYER "}",
     "input.shape: must have 2 to 8 dimensions", AT_PARSE},
    {"input dim above 2^53", "{'name': 't', 'input': {'shape': [2, 1e16]}, " ONE_LAYER "}",
     "input.shape[1]: must be at most 9007199254740991", AT_PARSE},
    {"element count overflows", "{'name': 't', 'input': {'shape': [1e15, 1e15]}, " ONE_LAYER "}",
     "input.shape: [1000000000000000, 1000000000000000] has too many elements", AT_PARSE},
    {"byte count overflows", "{'name': 't', 'input': {'shape': [1024, 1024, 1024, 1024, 1024, 1024]}, " ONE_LAYER "}",
     "input.shape: [1024, 1024, 1024, 1024, 1024, 1024] has too many elements", AT_PARSE},
    {"negative seed", HEAD ONE_LAYER ", 'seed': -1}", "seed: must be a non-negative integer, got -1",
     AT_PARSE},
    {"fractional seed", HEAD ONE_LAYER ", 'seed': 1.5}", "seed: must be a non-negative integer, got 1.5",
     AT_PARSE},
    {"seed above 2^53", HEAD ONE_LAYER ", 'seed': 1e17}", "seed: must be at most 9007199254740991",
     AT_PARSE},
    {"dropout rate 1", HEAD "'layers': [{'name': 'a', 'op': 'dropout', 'rate': 1}]}",
     "layers[0] (a).rate: must be a number in [0, 1), got 1", AT_PARSE},
    {"negative stddev", HEAD "'layers': [{'name': 'a', 'op': 'gaussian_noise', 'stddev': -0.1}]}",
     "layers[0] (a).stddev: must be a number >= 0, got -0.1", AT_PARSE},
    {"batchnorm momentum above 1", HEAD "'layers': [{'name': 'a', 'op': 'batchnorm', 'momentum': 1.5}]}",
     "layers[0] (a).momentum: must be a number in [0, 1], got 1.5", AT_PARSE},
    {"layernorm eps 0", HEAD "'layers': [{'name': 'a', 'op': 'layernorm', 'eps': 0}]}",
     "layers[0] (a).eps: must be a number > 0, got 0", AT_PARSE},
    {"min_memory_saving 1", HEAD ONE_LAYER ", 'min_memory_saving': 1}",
     "min_memory_saving: must be a number in [0, 1), got 1", AT_PARSE},
    {"negative rtol", HEAD ONE_LAYER ", 'tolerance': {'rtol': -1e-6}}",
     "tolerance.rtol: must be a number >= 0, got -1e-06", AT_PARSE},
    {"zero steps", HEAD ONE_LAYER ", 'train': {'steps': 0}}",
     "train.steps: must be a positive integer, got 0", AT_PARSE},
    {"too many steps", HEAD ONE_LAYER ", 'train': {'steps': 1000001}}",
     "train.steps: must be at most 1000000", AT_PARSE},
    {"zero learning rate", HEAD ONE_LAYER ", 'train': {'lr': 0}}",
     "train.lr: must be a number > 0, got 0", AT_PARSE},
    {"adam beta2 of 1", HEAD ONE_LAYER ", 'train': {'optimizer': 'adam', 'beta2': 1}}",
     "train.beta2: must be a number in [0, 1), got 1", AT_PARSE},
    {"momentum with adam", HEAD ONE_LAYER ", 'train': {'optimizer': 'adam', 'momentum': 0.9}}",
     "train.momentum: applies only to optimizer \"momentum\" (this case uses \"adam\")", AT_PARSE},
    {"beta1 with sgd", HEAD ONE_LAYER ", 'train': {'beta1': 0.9}}",
     "train.beta1: applies only to optimizer \"adam\"", AT_PARSE},
    /* names and choices */
    {"bad optimizer", HEAD ONE_LAYER ", 'train': {'optimizer': 'rmsprop'}}",
     "train.optimizer: must be one of sgd, momentum, adam, adamw, got \"rmsprop\"", AT_PARSE},
    {"bad rng policy", HEAD ONE_LAYER ", 'policies': {'rng': 'global'}}",
     "policies.rng: must be one of counter, stateful, stash, got \"global\"", AT_PARSE},
    {"bad batchnorm policy", HEAD ONE_LAYER ", 'policies': {'batchnorm_recompute': 'twice'}}",
     "policies.batchnorm_recompute: must be one of skip, update, got \"twice\"", AT_PARSE},
    {"bad expect", HEAD ONE_LAYER ", 'expect': 'same'}",
     "expect: must be one of identical, close, mismatch, any, got \"same\"", AT_PARSE},
    {"bad expect_memory", HEAD ONE_LAYER ", 'expect_memory': 'maybe'}",
     "expect_memory: must be one of met, unmet, got \"maybe\"", AT_PARSE},
    {"bad loss", HEAD ONE_LAYER ", 'loss': {'op': 'l1'}}",
     "loss.op: must be one of mean, sum, mse, cross_entropy, got \"l1\"", AT_PARSE},
    {"bad input dist", "{'name': 't', 'input': {'shape': [2, 3], 'dist': 'gauss'}, " ONE_LAYER "}",
     "input.dist: must be one of uniform, normal, tokens, got \"gauss\"", AT_PARSE},
    {"layer name with a space", HEAD "'layers': [{'name': 'a b', 'op': 'relu'}]}",
     "layers[0].name: must be 1 to 63 characters from A-Z a-z 0-9 _ -, got \"a b\"", AT_PARSE},
    {"empty layer name", HEAD "'layers': [{'name': '', 'op': 'relu'}]}",
     "layers[0].name: must be 1 to 63 characters", AT_PARSE},
    {"layer name of 64 characters",
     HEAD "'layers': [{'name': '0123456789012345678901234567890123456789012345678901234567890123', "
          "'op': 'relu'}]}",
     "layers[0].name: must be 1 to 63 characters", AT_PARSE},
    {"layer named input", HEAD "'layers': [{'name': 'input', 'op': 'relu'}]}",
     "layers[0].name: \"input\" is reserved for the model input", AT_PARSE},
    {"case name with a slash", "{'name': '../x', 'input': {'shape': [2, 3]}, " ONE_LAYER "}",
     "name: must be 1 to 63 characters", AT_PARSE},
    {"duplicate layer names",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'a', 'op': 'tanh'}]}",
     "layers[1].name: duplicate layer name \"a\" (also layers[0])", AT_PARSE},
    /* references between layers */
    {"inputs names a later layer",
     HEAD "'layers': [{'name': 'a', 'op': 'relu', 'inputs': ['b']}, {'name': 'b', 'op': 'tanh'}]}",
     "layers[0] (a).inputs[0]: \"b\" is not an earlier layer (it is layers[1], a later layer)",
     AT_PARSE},
    {"inputs names a missing layer",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'tanh', 'inputs': 'dec9'}]}",
     "layers[1] (b).inputs: \"dec9\" is not an earlier layer (no layer has that name)", AT_PARSE},
    {"inputs names the layer itself", HEAD "'layers': [{'name': 'a', 'op': 'relu', 'inputs': ['a']}]}",
     "layers[0] (a).inputs[0]: \"a\" is not an earlier layer (it is this layer)", AT_PARSE},
    {"inputs not a name", HEAD "'layers': [{'name': 'a', 'op': 'relu', 'inputs': 3}]}",
     "layers[0] (a).inputs: must be a layer name or a list of one, got a number", AT_PARSE},
    {"single-input op given two", HEAD "'layers': [{'name': 'a', 'op': 'relu', 'inputs': ['input', 'input']}]}",
     "layers[0] (a).inputs: relu takes exactly one input, got 2", AT_PARSE},
    {"add with one input", HEAD "'layers': [{'name': 'a', 'op': 'add', 'inputs': ['input']}]}",
     "layers[0] (a): add with one input needs a constant operand: `scalar` or `constant_shape`",
     AT_GRAPH},
    {"add with nine inputs",
     HEAD "'layers': [{'name': 'a', 'op': 'add', 'inputs': ['input','input','input','input','input',"
          "'input','input','input','input']}]}",
     "layers[0] (a).inputs: add needs 1 to 8 inputs, got 9", AT_PARSE},
    {"concat without inputs", HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'c', 'op': 'concat'}]}",
     "layers[1] (c).inputs: required for concat", AT_PARSE},
    {"add inputs as a string", HEAD "'layers': [{'name': 'a', 'op': 'add', 'inputs': 'input'}]}",
     "layers[0] (a): add with one input needs a constant operand", AT_GRAPH},
    {"add inputs as a number", HEAD "'layers': [{'name': 'a', 'op': 'add', 'inputs': 3}]}",
     "layers[0] (a).inputs: must be a layer name or a list of 1 to 8, got a number", AT_PARSE},
    {"add of two inputs and a scalar",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'add', 'inputs': ['a', 'input'], "
          "'scalar': 1}]}",
     "layers[1] (b): add: `scalar` and `constant_shape` are for a layer with one input", AT_GRAPH},
    {"sub of shapes that do not broadcast",
     HEAD "'layers': [{'name': 'a', 'op': 'sum', 'dim': [1]}, {'name': 'b', 'op': 'sub', 'inputs': ['input', 'a']}]}",
     "layers[1] (b): inputs input 0 [2, 3, 8, 8] and input 1 [2, 8, 8] differ in shape and do not broadcast (sub", AT_GRAPH},
    {"sum over a dim twice", HEAD "'layers': [{'name': 'a', 'op': 'sum', 'dim': [1, -3]}]}",
     "layers[0] (a): sum: dim lists dim 1 twice", AT_GRAPH},
    {"expand that shrinks", HEAD "'layers': [{'name': 'a', 'op': 'expand', 'shape': [2, 2, 8, 8]}]}",
     "layers[0] (a): expand: the input [2, 3, 8, 8] cannot expand to shape [2, 2, 8, 8]", AT_GRAPH},
    {"masked_fill mask larger than its input",
     HEAD "'layers': [{'name': 'a', 'op': 'masked_fill', 'mask_shape': [4, 1, 1, 1, 1], 'value': 0}]}",
     "masked_fill: mask_shape [4, 1, 1, 1, 1] does not broadcast to the input", AT_GRAPH},
    {"pow without exponent", HEAD "'layers': [{'name': 'a', 'op': 'pow'}]}",
     "exponent", AT_PARSE},
    /* checkpoint */
    {"segments out of order",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'relu'}, {'name': 'c', 'op': 'relu'}], "
          "'checkpoint': {'segments': [['c', 'c'], ['a', 'b']]}}",
     "checkpoint.segments[1]: out of order: comes before segments[0]", AT_PARSE},
    {"segments overlapping",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'relu'}, {'name': 'c', 'op': 'relu'}], "
          "'checkpoint': {'segments': [['a', 'b'], ['b', 'c']]}}",
     "checkpoint.segments[1]: overlaps segments[0]", AT_PARSE},
    {"segment end names no layer",
     HEAD ONE_LAYER ", 'checkpoint': {'segments': [['a', 'zz']]}}",
     "checkpoint.segments[0][1]: \"zz\" is not a layer", AT_PARSE},
    {"segment reversed",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'relu'}], "
          "'checkpoint': {'segments': [['b', 'a']]}}",
     "checkpoint.segments[0]: first layer \"b\" (layers[1]) comes after last layer \"a\" (layers[0])",
     AT_PARSE},
    {"segment not a pair", HEAD ONE_LAYER ", 'checkpoint': {'segments': [['a']]}}",
     "checkpoint.segments[0]: must be a [first, last] pair of layer names", AT_PARSE},
    {"segment end not a string", HEAD ONE_LAYER ", 'checkpoint': {'segments': [['a', 0]]}}",
     "checkpoint.segments[0][1]: must be a string, got a number", AT_PARSE},
    {"no segments", HEAD ONE_LAYER ", 'checkpoint': {'segments': []}}",
     "checkpoint.segments: must hold at least one [first, last] pair", AT_PARSE},
    {"two checkpoint forms", HEAD ONE_LAYER ", 'checkpoint': {'every': 2, 'policy': 'sqrt'}}",
     "checkpoint: must give exactly one of segments, every, policy", AT_PARSE},
    {"empty checkpoint", HEAD ONE_LAYER ", 'checkpoint': {}}",
     "checkpoint: must give exactly one of segments, every, policy", AT_PARSE},
    {"every 0", HEAD ONE_LAYER ", 'checkpoint': {'every': 0}}",
     "checkpoint.every: must be a positive integer, got 0", AT_PARSE},
    {"policy none", HEAD ONE_LAYER ", 'checkpoint': {'policy': 'none'}}",
     "checkpoint.policy: must be one of sqrt, got \"none\"", AT_PARSE},
    /* shared parameters ("share") */
#define TOK "{'name': 't', 'input': {'shape': [2, 5], 'dist': 'tokens', 'vocab': 7}, "
#define TIED(share) TOK "'layers': [{'name': 'tok', 'op': 'embedding', 'vocab': 7, 'units': 4}, " \
    "{'name': 'ln', 'op': 'layernorm', 'normalized_shape': 4}, " \
    "{'name': 'q', 'op': 'linear', 'units': 4}, " \
    "{'name': 'head', 'op': 'linear', 'units': 7, 'bias': false, 'share': " share "}], " \
    "'loss': {'op': 'cross_entropy', 'class_dim': -1}}"
    {"share of no layer", TIED("'tk.weight'"),
     "layers[3] (head).share: \"tk.weight\" names no layer of the case (no layer is called \"tk\")",
     AT_GRAPH},
    {"share of a missing parameter", TIED("'tok.bias'"),
     "layers[3] (head).share: layer tok (embedding) has no parameter `bias`", AT_GRAPH},
    {"share of another shape", TIED("'q.weight'"),
     "layers[3] (head).share: head.weight is [7, 4] but q.weight is [4, 4]: a shared parameter "
     "has one shape", AT_GRAPH},
    {"share of its own parameter", TIED("'head.weight'"),
     "layers[3] (head).share: \"head.weight\" is a parameter of this layer itself", AT_GRAPH},
    {"share of a slot the layer lacks", TIED("{'bias': 'q.bias'}"),
     "layers[3] (head).share.bias: layer head (linear) has no parameter `bias` to share",
     AT_GRAPH},
    {"share without a parameter name", TIED("'tok'"),
     "layers[3] (head).share: must name a parameter of another layer, \"LAYER.weight\"", AT_PARSE},
    {"share of the wrong type", TIED("['tok.weight']"),
     "layers[3] (head).share: must be \"LAYER.weight\" (this layer uses the weight of LAYER) or an "
     "object", AT_PARSE},
    {"share with an unknown slot", TIED("{'weights': 'tok.weight'}"),
     "layers[3] (head).share.weights: unknown key (allowed: weight, bias)", AT_PARSE},
    {"share of nothing", TIED("{}"), "layers[3] (head).share: names no parameter", AT_PARSE},
    {"share on an op without parameters",
     HEAD "'layers': [{'name': 'a', 'op': 'relu', 'share': 'b.weight'}]}",
     "layers[0] (a).share: unknown key for relu", AT_PARSE},
    {"share of a buffer",
     "{'name': 't', 'input': {'shape': [2, 3]}, 'layers': [{'name': 'bn', 'op': 'batchnorm'}, "
     "{'name': 'l', 'op': 'linear', 'units': 3, 'share': {'bias': 'bn.running_mean'}}]}",
     "layers[1] (l).share.bias: layer bn (batchnorm) has a buffer `running_mean`: only "
     "parameters (weight, bias) can be shared", AT_GRAPH},
    {"shares in a cycle",
     "{'name': 't', 'input': {'shape': [2, 3]}, 'layers': ["
     "{'name': 'a', 'op': 'linear', 'units': 3, 'share': 'b.weight'}, "
     "{'name': 'b', 'op': 'linear', 'units': 3, 'share': 'a.weight'}]}",
     "layers[0] (a).share: the shares form a cycle (a.weight -> b.weight -> a.weight)", AT_GRAPH},
    /* loss options */
    {"label_smoothing above 1",
     TOK "'layers': [{'name': 'tok', 'op': 'embedding', 'vocab': 7, 'units': 4}], "
     "'loss': {'op': 'cross_entropy', 'label_smoothing': 1.5}}",
     "loss.label_smoothing: must be", AT_PARSE},
    {"label_smoothing on mse", HEAD ONE_LAYER ", 'loss': {'op': 'mse', 'label_smoothing': 0.1}}",
     "loss.label_smoothing: applies only to cross_entropy (this loss is mse)", AT_PARSE},
    /* instancenorm: groupnorm with one group per channel */
    {"instancenorm with groups",
     HEAD "'layers': [{'name': 'n', 'op': 'instancenorm', 'groups': 3}]}",
     "layers[0] (n).groups: instancenorm has one group per channel", AT_PARSE},
    {"groupnorm without groups", HEAD "'layers': [{'name': 'n', 'op': 'groupnorm'}]}",
     "layers[0] (n).groups: required for groupnorm", AT_PARSE},
    /* shapes (found by ck_graph_build) */
    {"add of different shapes",
     HEAD "'layers': [{'name': 'a', 'op': 'conv2d', 'filters': 4, 'kernel': 3}, "
          "{'name': 's', 'op': 'add', 'inputs': ['a', 'input']}]}",
     "layers[1] (s).inputs: inputs \"a\" [2, 4, 6, 6] and \"input\" [2, 3, 8, 8] differ in shape",
     AT_GRAPH},
    {"concat of different spatial sizes",
     HEAD "'layers': [{'name': 'a', 'op': 'conv2d', 'filters': 4, 'kernel': 3}, "
          "{'name': 'c', 'op': 'concat', 'inputs': ['input', 'a']}]}",
     "layers[1] (c).inputs: inputs \"input\" [2, 3, 8, 8] and \"a\" [2, 4, 6, 6] differ outside dim 1",
     AT_GRAPH},
    {"concat of different ranks",
     HEAD "'layers': [{'name': 'f', 'op': 'flatten'}, "
          "{'name': 'c', 'op': 'concat', 'inputs': ['input', 'f']}]}",
     "layers[1] (c).inputs: inputs \"input\" [2, 3, 8, 8] and \"f\" [2, 192] differ outside dim 1",
     AT_GRAPH},
    {"kernel larger than a valid input",
     "{'name': 't', 'input': {'shape': [2, 3, 3]}, "
     "'layers': [{'name': 'a', 'op': 'conv1d', 'filters': 4, 'kernel': 5}]}",
     "layers[0] (a): kernel 5 (dilated 5) is larger than the input 3 in spatial dim 0", AT_GRAPH},
    {"dilated kernel larger than the input",
     HEAD CONV("'filters': 4, 'kernel': [1, 3], 'dilation': 4"),
     "layers[0] (a): kernel 3 (dilated 9) is larger than the input 8 in spatial dim 1", AT_GRAPH},
    {"kernel larger than the padded input",
     HEAD CONV("'filters': 4, 'kernel': 11, 'padding': 1"),
     "layers[0] (a): kernel 11 (dilated 11) is larger than the padded input 10", AT_GRAPH},
    {"pool window larger than the input",
     HEAD "'layers': [{'name': 'p', 'op': 'maxpool2d', 'pool': [2, 9]}]}",
     "layers[0] (p): pool window 9 is larger than the input 8 in spatial dim 1", AT_GRAPH},
    {"conv3d on a 4-D input", HEAD "'layers': [{'name': 'a', 'op': 'conv3d', 'filters': 4, 'kernel': 1}]}",
     "layers[0] (a): conv3d needs a rank-5 input (N, C, D, H, W), got [2, 3, 8, 8]", AT_GRAPH},
    {"upsampled size overflows",
     "{'name': 't', 'input': {'shape': [1, 1, 1099511627776]}, "
     "'layers': [{'name': 'u', 'op': 'upsample1d', 'scale': 1048576}]}",
     "layers[0] (u): output shape [1, 1, 1152921504606846976] is too large", AT_GRAPH},
    {"linear weight too large",
     "{'name': 't', 'input': {'shape': [1, 1099511627776]}, "
     "'layers': [{'name': 'l', 'op': 'linear', 'units': 1048576}]}",
     "layers[0] (l): weight shape [1048576, 1099511627776] is too large", AT_GRAPH},
    {"batchnorm with one value per channel",
     "{'name': 't', 'input': {'shape': [1, 3]}, 'layers': [{'name': 'bn', 'op': 'batchnorm'}]}",
     "layers[0] (bn): batchnorm in training needs more than 1 value per channel", AT_GRAPH},
    {"cross_entropy with one class",
     "{'name': 't', 'input': {'shape': [4, 1]}, " ONE_LAYER ", 'loss': {'op': 'cross_entropy'}}",
     "loss.op: cross_entropy needs 2 to", AT_GRAPH},
    {"cast without a target dtype",
     HEAD "'layers': [{'name': 'c', 'op': 'cast'}]}", "layers[0] (c).to: required for cast", AT_PARSE},
    {"cast to an integer dtype",
     HEAD "'layers': [{'name': 'c', 'op': 'cast', 'to': 'int64'}]}",
     "layers[0] (c).to: must be one of float32, float16, bfloat16, got \"int64\"", AT_PARSE},
    {"a layer nobody reads",
     HEAD "'layers': [{'name': 'a', 'op': 'relu'}, {'name': 'b', 'op': 'tanh', 'inputs': 'input'}]}",
     "layers[0] (a): output is never used", AT_GRAPH},
};

#define N_BAD ((int)(sizeof bad_rows / sizeof bad_rows[0]))

/* Parses text and, when that succeeds, builds the graph; returns the first failure. */
static ck_status parse_and_build(const char *text, size_t len, stage *failed_at, ck_error *err)
{
    ck_case c;
    ck_graph g;
    ck_status st = ck_case_parse(text, len, CASE_PATH, &c, err);
    *failed_at = AT_PARSE;
    if (st != CK_OK)
        return st;
    *failed_at = AT_GRAPH;
    st = ck_graph_build(&c, &g, err);
    ck_graph_free(&g);
    ck_case_free(&c);
    return st;
}

START_TEST(bad_case_gives_one_line_naming_file_and_path)
{
    const bad_row *row = &bad_rows[_i];
    char *text = q(row->text);
    ck_error err = {{0}};
    stage at;
    ck_status st = parse_and_build(text, strlen(text), &at, &err);
    ck_assert_msg(st == CK_ERR_INPUT, "%s: status %s, message: %s", row->desc, ck_status_str(st),
                  err.msg);
    ck_assert_msg(at == row->at, "%s: failed in %s, expected in %s: %s", row->desc,
                  at == AT_PARSE ? "parse" : "graph", row->at == AT_PARSE ? "parse" : "graph",
                  err.msg);
    ck_assert_msg(strncmp(err.msg, CASE_PATH ": ", strlen(CASE_PATH) + 2) == 0,
                  "%s: message does not start with the path: %s", row->desc, err.msg);
    char *want = q(row->fragment);
    ck_assert_msg(strstr(err.msg, want) != NULL, "%s: message lacks \"%s\": %s", row->desc,
                  want, err.msg);
    ck_assert_msg(strchr(err.msg, '\n') == NULL, "%s: message spans lines: %s", row->desc,
                  err.msg);
    free(want);
    free(text);
}
END_TEST

/* ---- the documented example ---------------------------------------------------------- */

static const char example_text[] =
    "{\n"
    "  'name': 'unet3d_bn', 'description': 'free text', 'seed': 1234,\n"
    "  'input':  {'shape': [2, 1, 16, 16, 16], 'dist': 'uniform'},\n"
    "  'layers': [\n"
    "    {'name': 'enc1', 'op': 'conv3d', 'filters': 4, 'kernel': 3, 'padding': 'same', 'bias': false},\n"
    "    {'name': 'enc1_relu', 'op': 'relu'},\n"
    "    {'name': 'enc1_bn', 'op': 'batchnorm', 'momentum': 0.1, 'eps': 1e-5},\n"
    "    {'name': 'down', 'op': 'maxpool3d', 'pool': 2},\n"
    "    {'name': 'mid', 'op': 'conv3d', 'filters': 4, 'kernel': 3, 'padding': 'same'},\n"
    "    {'name': 'up', 'op': 'upsample3d', 'scale': 2},\n"
    "    {'name': 'skip', 'op': 'add', 'inputs': ['up', 'enc1_bn']},\n"
    "    {'name': 'drop', 'op': 'dropout', 'rate': 0.3},\n"
    "    {'name': 'head', 'op': 'conv3d', 'filters': 1, 'kernel': 1}\n"
    "  ],\n"
    "  'loss': {'op': 'mse'},\n"
    "  'checkpoint': {'segments': [['enc1', 'down'], ['mid', 'skip']]},\n"
    "  'train': {'steps': 2, 'optimizer': 'adam', 'lr': 0.001},\n"
    "  'policies': {'rng': 'counter', 'batchnorm_recompute': 'skip'},\n"
    "  'tolerance': {'rtol': 1.3e-6, 'atol': 1e-5},\n"
    "  'min_memory_saving': 0.2,\n"
    "  'expect': 'identical'\n"
    "}\n";

START_TEST(example_parses_with_every_field)
{
    char *text = q(example_text);
    ck_case c;
    ck_error err = {{0}};
    ck_status st = ck_case_parse(text, strlen(text), CASE_PATH, &c, &err);
    ck_assert_msg(st == CK_OK, "example: %s", err.msg);

    ck_assert_str_eq(c.path, CASE_PATH);
    ck_assert_str_eq(c.name, "unet3d_bn");
    ck_assert_str_eq(c.description, "free text");
    ck_assert_uint_eq(c.seed, 1234);
    ck_assert_int_eq(c.input_shape.ndim, 5);
    ck_assert_int_eq(c.input_shape.dim[0], 2);
    ck_assert_int_eq(c.input_shape.dim[4], 16);
    ck_assert_int_eq(c.input_dist, CK_DIST_UNIFORM);
    ck_assert_int_eq(c.n_layers, 9);

    const ck_layer_spec *L = c.layers;
    ck_assert_str_eq(L[0].name, "enc1");
    ck_assert_str_eq(L[0].op_name, "conv3d");
    ck_assert_int_eq(L[0].op.kind, CK_OP_CONV);
    ck_assert_int_eq(L[0].op.nsp, 3);
    ck_assert_int_eq(L[0].op.filters, 4);
    for (int d = 0; d < 3; d++) {
        ck_assert_int_eq(L[0].op.kernel[d], 3);
        ck_assert_int_eq(L[0].op.stride[d], 1);
        ck_assert_int_eq(L[0].op.dilation[d], 1);
        ck_assert_int_eq(L[3].op.kernel[d], 2);
        ck_assert_int_eq(L[3].op.stride[d], 2);
        ck_assert_int_eq(L[5].op.scale[d], 2);
    }
    ck_assert_int_eq(L[0].op.pad_mode, CK_PAD_SAME);
    ck_assert(!L[0].op.bias);
    ck_assert_int_eq(L[0].n_in, 1);
    ck_assert_int_eq(L[0].in[0], -1);
    ck_assert_int_eq(L[1].op.kind, CK_OP_RELU);
    ck_assert_int_eq(L[1].in[0], 0);
    ck_assert_int_eq(L[2].op.kind, CK_OP_BATCHNORM);
    ck_assert_double_eq(L[2].op.momentum, 0.1);
    ck_assert_double_eq(L[2].op.eps, 1e-5);
    ck_assert(!L[2].op.eval);
    ck_assert_int_eq(L[3].op.kind, CK_OP_MAXPOOL);
    ck_assert(L[4].op.bias);
    ck_assert_int_eq(L[5].op.kind, CK_OP_UPSAMPLE);
    ck_assert_int_eq(L[6].op.kind, CK_OP_ADD);
    ck_assert_int_eq(L[6].n_in, 2);
    ck_assert_int_eq(L[6].in[0], 5);
    ck_assert_int_eq(L[6].in[1], 2);
    ck_assert_int_eq(L[7].op.kind, CK_OP_DROPOUT);
    ck_assert_double_eq(L[7].op.rate, 0.3);
    ck_assert_int_eq(L[8].op.filters, 1);
    ck_assert_int_eq(L[8].op.pad_mode, CK_PAD_VALID);

    ck_assert_int_eq(c.loss, CK_LOSS_MSE);
    ck_assert_int_eq(c.ckpt_kind, CK_CKPT_SEGMENTS);
    ck_assert_int_eq(c.n_segments, 2);
    ck_assert_int_eq(c.segments[0][0], 0);
    ck_assert_int_eq(c.segments[0][1], 3);
    ck_assert_int_eq(c.segments[1][0], 4);
    ck_assert_int_eq(c.segments[1][1], 6);
    ck_assert_int_eq(c.steps, 2);
    ck_assert_int_eq(c.optimizer.kind, CK_OPT_ADAM);
    ck_assert_double_eq(c.optimizer.lr, 0.001);
    ck_assert_double_eq(c.optimizer.beta1, 0.9);
    ck_assert_double_eq(c.optimizer.beta2, 0.999);
    ck_assert_double_eq(c.optimizer.eps, 1e-8);
    ck_assert_int_eq(c.rng, CK_RNG_COUNTER);
    ck_assert_int_eq(c.bn, CK_BN_SKIP);
    ck_assert_double_eq(c.rtol, 1.3e-6);
    ck_assert_double_eq(c.atol, 1e-5);
    ck_assert(c.has_min_memory_saving);
    ck_assert_double_eq(c.min_memory_saving, 0.2);
    ck_assert_int_eq(c.expect, CK_EXPECT_IDENTICAL);
    ck_assert(c.expect_memory_met);
    ck_case_free(&c);
    ck_assert_ptr_null(c.layers);
    free(text);
}
END_TEST

START_TEST(defaults_are_applied)
{
    char *text = q("{'name': 'd', 'input': {'shape': [2, 3, 9, 9]}, 'layers': ["
                   "{'name': 'c', 'op': 'conv2d', 'filters': 2, 'kernel': 3},"
                   "{'name': 'p', 'op': 'avgpool2d', 'pool': 3},"
                   "{'name': 'bn', 'op': 'batchnorm'},"
                   "{'name': 'lr', 'op': 'leaky_relu'},"
                   "{'name': 'ln', 'op': 'layernorm'},"
                   "{'name': 'dr', 'op': 'dropout'},"
                   "{'name': 'f', 'op': 'flatten'},"
                   "{'name': 'l', 'op': 'linear', 'units': 3}]}");
    ck_case c;
    ck_error err = {{0}};
    ck_assert_msg(ck_case_parse(text, strlen(text), CASE_PATH, &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_ptr_null(c.description);
    ck_assert_uint_eq(c.seed, 0);
    ck_assert_int_eq(c.input_dist, CK_DIST_UNIFORM);
    ck_assert_int_eq(c.loss, CK_LOSS_MEAN);
    ck_assert_int_eq(c.ckpt_kind, CK_CKPT_SQRT);
    ck_assert_int_eq(c.n_segments, 0);
    ck_assert_int_eq(c.steps, 1);
    ck_assert_int_eq(c.optimizer.kind, CK_OPT_SGD);
    ck_assert_double_eq(c.optimizer.lr, 0.01);
    ck_assert_double_eq(c.optimizer.momentum, 0.9);
    ck_assert_double_eq(c.optimizer.weight_decay, 0.0);
    ck_assert_int_eq(c.rng, CK_RNG_COUNTER);
    ck_assert_int_eq(c.bn, CK_BN_SKIP);
    ck_assert_double_eq(c.rtol, 1.3e-6);
    ck_assert_double_eq(c.atol, 1e-5);
    ck_assert(!c.has_min_memory_saving);
    ck_assert_int_eq(c.expect, CK_EXPECT_CLOSE);
    ck_assert(c.expect_memory_met);

    const ck_layer_spec *L = c.layers;
    ck_assert_int_eq(L[0].op.stride[0], 1);
    ck_assert_int_eq(L[0].op.stride[1], 1);
    ck_assert_int_eq(L[0].op.dilation[1], 1);
    ck_assert_int_eq(L[0].op.pad_mode, CK_PAD_VALID);
    ck_assert(L[0].op.bias);
    ck_assert_int_eq(L[1].op.kernel[0], 3);
    ck_assert_int_eq(L[1].op.stride[0], 3); /* a pool steps by its window */
    ck_assert_double_eq(L[2].op.momentum, 0.1);
    ck_assert_double_eq(L[2].op.eps, 1e-5);
    ck_assert(!L[2].op.eval);
    ck_assert_double_eq(L[3].op.slope, 0.01);
    ck_assert_double_eq(L[4].op.eps, 1e-5);
    ck_assert_double_eq(L[5].op.rate, 0.5);
    ck_assert(L[7].op.bias);
    for (int i = 0; i < c.n_layers; i++) {
        ck_assert_int_eq(L[i].n_in, 1);
        ck_assert_int_eq(L[i].in[0], i - 1);
    }
    ck_case_free(&c);
    free(text);
}
END_TEST

START_TEST(alternative_forms_are_accepted)
{
    char *text = q("{'name': 'alt-2', 'description': {'any': ['json', 1]}, 'seed': 9007199254740991,"
                   " 'input': {'shape': [2, 3, 9, 9], 'dist': 'normal'}, 'layers': ["
                   "{'name': 'c', 'op': 'conv2d', 'filters': 2, 'kernel': [3, 5], 'stride': [1, 2],"
                   " 'padding': [1, 2], 'dilation': [2, 1], 'bias': true},"
                   "{'name': 'p', 'op': 'maxpool2d', 'pool': [2, 1], 'stride': 1, 'inputs': ['c']},"
                   "{'name': 'x', 'op': 'conv2d', 'filters': 2, 'kernel': 1, 'padding': 'valid',"
                   " 'inputs': 'input'},"
                   "{'name': 'bn', 'op': 'batchnorm', 'eval': true, 'momentum': 1, 'inputs': 'x'},"
                   "{'name': 'u', 'op': 'upsample2d', 'scale': [1, 2], 'inputs': ['p']},"
                   "{'name': 'g', 'op': 'gaussian_noise', 'stddev': 0},"
                   "{'name': 'k', 'op': 'concat', 'inputs': ['bn', 'input', 'bn']}],"
                   " 'checkpoint': {'every': 3}, 'expect_memory': 'unmet', 'expect': 'mismatch',"
                   " 'train': {'optimizer': 'momentum', 'momentum': 0.5, 'weight_decay': 1e-4,"
                   " 'steps': 1000000}, 'policies': {'rng': 'stash', 'batchnorm_recompute': 'update'}}");
    ck_case c;
    ck_error err = {{0}};
    ck_assert_msg(ck_case_parse(text, strlen(text), CASE_PATH, &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_str_eq(c.description, "{\"any\":[\"json\",1]}");
    ck_assert_uint_eq(c.seed, 9007199254740991ull);
    ck_assert_int_eq(c.input_dist, CK_DIST_NORMAL);
    const ck_layer_spec *L = c.layers;
    ck_assert_int_eq(L[0].op.kernel[0], 3);
    ck_assert_int_eq(L[0].op.kernel[1], 5);
    ck_assert_int_eq(L[0].op.stride[1], 2);
    ck_assert_int_eq(L[0].op.pad_mode, CK_PAD_EXPLICIT);
    ck_assert_int_eq(L[0].op.pad[0], 1);
    ck_assert_int_eq(L[0].op.pad[1], 2);
    ck_assert_int_eq(L[0].op.dilation[0], 2);
    ck_assert_int_eq(L[1].op.kernel[0], 2);
    ck_assert_int_eq(L[1].op.kernel[1], 1);
    ck_assert_int_eq(L[1].op.stride[0], 1);
    ck_assert_int_eq(L[1].in[0], 0);
    ck_assert_int_eq(L[2].in[0], -1);
    ck_assert(L[3].op.eval);
    ck_assert_int_eq(L[4].op.scale[1], 2);
    ck_assert_int_eq(L[4].in[0], 1);
    ck_assert_int_eq(L[6].n_in, 3);
    ck_assert_int_eq(L[6].in[1], -1);
    ck_assert_int_eq(c.ckpt_kind, CK_CKPT_EVERY);
    ck_assert_int_eq(c.ckpt_every, 3);
    ck_assert(!c.expect_memory_met);
    ck_assert_int_eq(c.expect, CK_EXPECT_MISMATCH);
    ck_assert_int_eq(c.optimizer.kind, CK_OPT_MOMENTUM);
    ck_assert_double_eq(c.optimizer.momentum, 0.5);
    ck_assert_double_eq(c.optimizer.weight_decay, 1e-4);
    ck_assert_int_eq(c.steps, 1000000);
    ck_assert_int_eq(c.rng, CK_RNG_STASH);
    ck_assert_int_eq(c.bn, CK_BN_UPDATE);
    ck_case_free(&c);
    free(text);

    text = q("{'name': 's', 'input': {'shape': [2, 3]}, 'layers': [{'name': 'a', 'op': 'relu'}],"
             " 'checkpoint': {'policy': 'sqrt'}}");
    ck_assert_msg(ck_case_parse(text, strlen(text), CASE_PATH, &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(c.ckpt_kind, CK_CKPT_SQRT);
    ck_case_free(&c);
    free(text);
}
END_TEST

START_TEST(text_need_not_be_nul_terminated)
{
    char *text = q(example_text);
    size_t len = strlen(text);
    char *exact = malloc(len); /* no room for a NUL: ASan catches any read past the end */
    ck_assert_ptr_nonnull(exact);
    memcpy(exact, text, len);
    ck_case c;
    ck_error err = {{0}};
    ck_assert_msg(ck_case_parse(exact, len, CASE_PATH, &c, &err) == CK_OK, "%s", err.msg);
    ck_case_free(&c);
    /* and a truncated, unterminated buffer fails cleanly */
    ck_assert_int_eq(ck_case_parse(exact, len / 2, CASE_PATH, &c, &err), CK_ERR_INPUT);
    free(exact);
    free(text);
}
END_TEST

/* Every prefix of a valid case is either the case itself or a clean error. */
START_TEST(every_truncation_fails_cleanly)
{
    char *text = q(example_text);
    size_t len = strlen(text);
    size_t last_brace = strrchr(text, '}') - text;
    for (size_t n = 0; n < len; n++) {
        char *cut = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(cut);
        memcpy(cut, text, n);
        ck_case c;
        ck_error err = {{0}};
        ck_status st = ck_case_parse(cut, n, CASE_PATH, &c, &err);
        if (n > last_brace) {
            ck_assert_msg(st == CK_OK, "prefix %zu: %s", n, err.msg);
            ck_case_free(&c);
        } else {
            ck_assert_msg(st == CK_ERR_INPUT, "prefix %zu: status %d", n, (int)st);
            ck_assert_msg(strncmp(err.msg, CASE_PATH ": ", strlen(CASE_PATH) + 2) == 0,
                          "prefix %zu: %s", n, err.msg);
        }
        free(cut);
    }
    free(text);
}
END_TEST

/* Deterministic byte mutations: parse and graph build must only ever say OK or INPUT. */
START_TEST(mutated_cases_never_crash)
{
    static const char alphabet[] = "{}[]\",:0123456789-+.eE tfn\\x\n'a";
    char *text = q(example_text);
    size_t len = strlen(text);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 3000; round++) {
        char *m = malloc(len);
        ck_assert_ptr_nonnull(m);
        memcpy(m, text, len);
        int edits = 1 + (int)(round % 3);
        for (int e = 0; e < edits; e++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(state >> 33) % len;
            m[at] = alphabet[(state >> 13) % (sizeof alphabet - 1)];
        }
        ck_error err = {{0}};
        stage where;
        ck_status st = parse_and_build(m, len, &where, &err);
        ck_assert_msg(st == CK_OK || st == CK_ERR_INPUT, "round %d: status %d: %s", round,
                      (int)st, err.msg);
        if (st != CK_OK) {
            ck_assert_msg(strncmp(err.msg, CASE_PATH ": ", strlen(CASE_PATH) + 2) == 0,
                          "round %d: %s", round, err.msg);
            ck_assert_msg(strchr(err.msg, '\n') == NULL, "round %d: %s", round, err.msg);
        }
        free(m);
    }
    free(text);
}
END_TEST

/* ---- files ---------------------------------------------------------------------------- */

static char *write_temp(const char *content)
{
    char tmpl[] = "/tmp/ck_case_test_XXXXXX";
    int fd = mkstemp(tmpl);
    ck_assert_int_ge(fd, 0);
    size_t n = strlen(content);
    ck_assert_int_eq(write(fd, content, n), (ssize_t)n);
    close(fd);
    return strdup(tmpl);
}

START_TEST(load_reports_io_errors_with_path_and_reason)
{
    ck_case c;
    ck_error err = {{0}};
    const char *missing = "/nonexistent/dir/case.json";
    ck_assert_int_eq(ck_case_load(missing, &c, &err), CK_ERR_IO);
    ck_assert_msg(strncmp(err.msg, missing, strlen(missing)) == 0, "%s", err.msg);
    ck_assert_msg(strstr(err.msg, strerror(ENOENT)) != NULL, "%s", err.msg);

    ck_assert_int_eq(ck_case_load("/tmp", &c, &err), CK_ERR_IO);
    ck_assert_msg(strncmp(err.msg, "/tmp: ", 6) == 0, "%s", err.msg);
    ck_assert_ptr_null(c.layers);
}
END_TEST

START_TEST(load_reads_files_and_rejects_empty_ones)
{
    ck_case c;
    ck_error err = {{0}};
    char *empty = write_temp("");
    ck_assert_int_eq(ck_case_load(empty, &c, &err), CK_ERR_INPUT);
    char want[256];
    snprintf(want, sizeof want, "%s: empty file", empty);
    ck_assert_str_eq(err.msg, want);
    unlink(empty);
    free(empty);

    char *text = q(example_text);
    char *file = write_temp(text);
    ck_assert_msg(ck_case_load(file, &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_str_eq(c.path, file);
    ck_assert_int_eq(c.n_layers, 9);
    ck_case_free(&c);
    unlink(file);
    free(file);
    free(text);
}
END_TEST

/* ---- names and the catalogue ----------------------------------------------------------- */

START_TEST(policy_names_round_trip)
{
    ck_rng_policy r;
    ck_bn_policy b;
    for (int i = 0; i < 3; i++) {
        ck_assert(ck_rng_policy_parse(ck_rng_policy_name((ck_rng_policy)i), &r));
        ck_assert_int_eq(r, i);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert(ck_bn_policy_parse(ck_bn_policy_name((ck_bn_policy)i), &b));
        ck_assert_int_eq(b, i);
    }
    ck_assert(!ck_rng_policy_parse("global", &r));
    ck_assert(!ck_bn_policy_parse("", &b));
    ck_assert_str_eq(ck_rng_policy_name(CK_RNG_STASH), "stash");
    ck_assert_str_eq(ck_bn_policy_name(CK_BN_UPDATE), "update");
    ck_assert_str_eq(ck_expect_name(CK_EXPECT_IDENTICAL), "identical");
    ck_assert_str_eq(ck_expect_name(CK_EXPECT_CLOSE), "close");
    ck_assert_str_eq(ck_expect_name(CK_EXPECT_MISMATCH), "mismatch");
    ck_assert_str_eq(ck_loss_kind_name(CK_LOSS_CROSS_ENTROPY), "cross_entropy");
    ck_assert_str_eq(ck_optimizer_kind_name(CK_OPT_ADAM), "adam");
    ck_assert_str_eq(ck_op_kind_name(CK_OP_GAUSSIAN_NOISE), "gaussian_noise");
}
END_TEST

/* cast's `to` and `from` are ck_dtype values; `from` defaults to float32 */
START_TEST(cast_dtypes_parse_into_the_layer)
{
    char *text = q(HEAD "'layers': [{'name': 'h', 'op': 'cast', 'to': 'float16'},"
                   "{'name': 'f', 'op': 'cast', 'to': 'float32', 'from': 'float16'},"
                   "{'name': 'b', 'op': 'cast', 'to': 'bfloat16', 'from': 'float32'}]}");
    ck_case c;
    ck_error err = {{0}};
    ck_assert_msg(ck_case_parse(text, strlen(text), CASE_PATH, &c, &err) == CK_OK, "%s", err.msg);
    ck_assert_int_eq(c.layers[0].op.cast_to, CK_F16);
    ck_assert_int_eq(c.layers[0].op.cast_from, CK_F32);
    ck_assert_int_eq(c.layers[1].op.cast_to, CK_F32);
    ck_assert_int_eq(c.layers[1].op.cast_from, CK_F16);
    ck_assert_int_eq(c.layers[2].op.cast_to, CK_BF16);
    ck_assert_int_eq(c.layers[2].op.cast_from, CK_F32);
    ck_case_free(&c);
    free(text);
}
END_TEST

START_TEST(catalogue_lists_every_op_once)
{
    static const char *const required[] = {
        "linear",    "conv1d",    "conv2d",     "conv3d",     "relu",       "leaky_relu",
        "gelu",      "tanh",      "sigmoid",    "batchnorm",  "layernorm",  "dropout",
        "gaussian_noise", "maxpool1d", "maxpool2d", "maxpool3d", "avgpool1d", "avgpool2d",
        "avgpool3d", "upsample1d", "upsample2d", "upsample3d", "add",       "concat",
        "flatten",   "matmul",    "softmax",    "log_softmax", "attention", "embedding",
        "reshape",   "permute",   "transpose",  "rmsnorm",    "groupnorm",  "mul",
        "silu",      "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "positional",
        "sqrt",      "rsqrt",     "reciprocal", "exp",        "log",        "neg",
        "erf",       "abs",       "slice",      "sub",        "div",        "maximum",
        "minimum",   "pow",       "masked_fill", "expand",    "sum",        "mean",
        "amax",      "cast"};
    int n = 0;
    const ck_op_info *cat = ck_op_catalogue(&n);
    /* every spelling a case could use before is still there (new ops may join) */
    ck_assert_int_ge(n, (int)(sizeof required / sizeof required[0]));
    bool kind_seen[CK_OP_KIND_COUNT] = {false};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const ck_op_info *info = ck_op_find(required[i]);
        ck_assert_msg(info != NULL, "%s: missing from the catalogue", required[i]);
        ck_assert_str_eq(info->name, required[i]);
        ck_assert_msg(info->summary && info->summary[0], "%s: no summary", required[i]);
        ck_assert_msg(info->options && info->options[0], "%s: no options", required[i]);
        bool spatial = info->kind == CK_OP_CONV || info->kind == CK_OP_MAXPOOL ||
                       info->kind == CK_OP_AVGPOOL || info->kind == CK_OP_UPSAMPLE ||
                       info->kind == CK_OP_CONV_TRANSPOSE;
        ck_assert_msg(spatial ? info->nsp >= 1 && info->nsp <= 3 : info->nsp == 0, "%s: nsp %d",
                      required[i], info->nsp);
    }
    for (int i = 0; i < n; i++) {
        ck_assert_msg(cat[i].summary && cat[i].summary[0], "%s: no summary", cat[i].name);
        ck_assert_msg(cat[i].options && cat[i].options[0], "%s: no options", cat[i].name);
        kind_seen[cat[i].kind] = true;
    }
    for (int k = 0; k < CK_OP_KIND_COUNT; k++)
        ck_assert_msg(kind_seen[k], "kind %s has no catalogue entry", ck_op_kind_name(k));
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(strcmp(cat[i].name, cat[j].name) != 0, "%s listed twice", cat[i].name);
    ck_assert_ptr_null(ck_op_find("conv4d"));
    ck_assert_ptr_null(ck_op_find(NULL));
}
END_TEST

/* The allowed keys the parser names for an op are the ones the catalogue documents. */
START_TEST(catalogue_options_match_the_keys_the_parser_accepts)
{
    int n = 0;
    const ck_op_info *cat = ck_op_catalogue(&n);
    for (int i = 0; i < n; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"name\": \"t\", \"input\": {\"shape\": [2, 3, 8, 8, 8]}, \"layers\": "
                 "[{\"name\": \"a\", \"op\": \"%s\", \"zzz\": 1}]}",
                 cat[i].name);
        ck_case c;
        ck_error err = {{0}};
        ck_assert_int_eq(ck_case_parse(text, strlen(text), CASE_PATH, &c, &err), CK_ERR_INPUT);
        const char *list = strstr(err.msg, "(allowed: ");
        ck_assert_msg(list != NULL, "%s: %s", cat[i].name, err.msg);
        char keys[512];
        snprintf(keys, sizeof keys, "%s", list + strlen("(allowed: "));
        char *close = strrchr(keys, ')');
        ck_assert_ptr_nonnull(close);
        *close = '\0';
        char *save = NULL;
        for (char *k = strtok_r(keys, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) {
            if (!strcmp(k, "name") || !strcmp(k, "op") || !strcmp(k, "share"))
                continue; /* the keys every layer (with parameters) takes */
            if (!strcmp(k, "inputs") && cat[i].kind != CK_OP_ADD && cat[i].kind != CK_OP_CONCAT)
                continue;
            ck_assert_msg(strstr(cat[i].options, k) != NULL,
                          "%s: key %s is accepted but not in the options text \"%s\"",
                          cat[i].name, k, cat[i].options);
        }
    }
}
END_TEST

Suite *suite_case(void)
{
    Suite *s = suite_create("case");
    TCase *bad = tcase_create("bad_cases");
    tcase_add_loop_test(bad, bad_case_gives_one_line_naming_file_and_path, 0, N_BAD);
    suite_add_tcase(s, bad);

    TCase *good = tcase_create("good_cases");
    tcase_add_test(good, example_parses_with_every_field);
    tcase_add_test(good, defaults_are_applied);
    tcase_add_test(good, alternative_forms_are_accepted);
    tcase_add_test(good, text_need_not_be_nul_terminated);
    tcase_add_test(good, load_reports_io_errors_with_path_and_reason);
    tcase_add_test(good, load_reads_files_and_rejects_empty_ones);
    tcase_add_test(good, policy_names_round_trip);
    tcase_add_test(good, catalogue_lists_every_op_once);
    tcase_add_test(good, cast_dtypes_parse_into_the_layer);
    tcase_add_test(good, catalogue_options_match_the_keys_the_parser_accepts);
    suite_add_tcase(s, good);

    /* Thousands of parses: generous under sanitizers. */
    TCase *robust = tcase_create("robustness");
    tcase_set_timeout(robust, 120);
    tcase_add_test(robust, every_truncation_fails_cleanly);
    tcase_add_test(robust, mutated_cases_never_crash);
    suite_add_tcase(s, robust);
    return s;
}
