/*
 * Reports of `judge` (framework_report.h).
 */
#include "reports/framework_report.h"

#include <inttypes.h>
#include <string.h>

#include "harness/core/text.h"
#include "harness/io/json_build.h"

static void replace(cJSON *root, const char *key, cJSON *item)
{
    if (cJSON_GetObjectItemCaseSensitive(root, key))
        cJSON_ReplaceItemInObjectCaseSensitive(root, key, item);
    else
        cJSON_AddItemToObject(root, key, item);
}

static void add_bytes(ck_json_builder *b, cJSON *o, const char *key, int64_t v)
{
    if (v >= 0)
        ck_json_add_int(b, o, key, v);
    else
        ck_json_add_null(b, o, key);
}

/* `case`: the model; `config`: what the driver ran (its own configuration object). */
static void add_case_config(ck_json_builder *b, cJSON *root, const ck_fw_input *in,
                            const ck_fw_item *it)
{
    const ck_fw_run *cr = &in->runs[it->ckpt_run];
    cJSON *c = cJSON_CreateObject();
    if (!c) {
        b->failed = true;
        return;
    }
    ck_json_add_string(b, c, "name", it->label);
    ck_json_add_string(b, c, "file", ck_fw_input_shown_path(in));
    ck_json_add_string(b, c, "description", in->model_name);
    replace(root, "case", c);
    cJSON *cfg = cJSON_CreateObject();
    if (!cfg) {
        b->failed = true;
        return;
    }
    ck_json_add_string(b, cfg, "judge_input", in->input_temporary ? NULL : in->path);
    ck_json_add_string(b, cfg, "mode", cr->mode);
    ck_json_add_int(b, cfg, "rank", cr->rank);
    ck_json_add_int(b, cfg, "steps", cr->n_steps);
    ck_json_add_string(b, cfg, "expect", "identical");
    if (it->cs.has_min_memory_saving)
        ck_json_add_real(b, cfg, "min_memory_saving", it->cs.min_memory_saving);
    else
        ck_json_add_null(b, cfg, "min_memory_saving");
    cJSON *wrapped = ck_json_add_array(b, cfg, "wrapped_modules");
    for (int i = 0; i < in->n_modules; i++)
        if (in->modules[i].wrapped)
            ck_json_add_string(b, wrapped, NULL, in->modules[i].name);
    if (in->config)
        ck_json_attach(b, cfg, "driver", cJSON_Duplicate(in->config, true));
    else
        ck_json_add_null(b, cfg, "driver");
    replace(root, "config", cfg);
}

/* What saved_bytes_peak measures, by driver: PyTorch's saved-tensor hooks, or the bytes
 * TensorFlow's allocator still held after the forward (what the tape keeps for backward). */
static const char *memory_measure(const ck_fw_input *in)
{
    if (in->framework && strcmp(in->framework, "keras") == 0)
        return "bytes TensorFlow's allocator held for backward after the forward, peak over "
               "the steps";
    return "bytes autograd saved for backward (unique storages, peak over a step)";
}

static void add_framework(ck_json_builder *b, cJSON *root, const ck_fw_input *in,
                          const ck_fw_item *it)
{
    const ck_fw_run *cr = &in->runs[it->ckpt_run], *pr = &in->runs[it->plain_run];
    cJSON *fw = ck_json_add_object(b, root, "framework");
    ck_json_add_string(b, fw, "name", in->framework);
    ck_json_add_string(b, fw, "version", in->framework_version);
    ck_json_add_string(b, fw, "device", in->device);
    ck_json_add_bool(b, fw, "deterministic", in->deterministic);
    ck_json_add_string(b, fw, "plain_run", pr->id);
    ck_json_add_string(b, fw, "checkpointed_run", cr->id);
    cJSON *ctl = ck_json_add_object(b, fw, "control");
    ck_json_add_bool(b, ctl, "ran", it->control_ran);
    if (it->control_ran) {
        ck_json_add_string(b, ctl, "verdict", ck_verdict_name(it->control_verdict));
        ck_json_add_int(b, ctl, "differing_tensors", it->control_differing);
        ck_json_add_string(b, ctl, "first", it->control_first[0] ? it->control_first : NULL);
    }
    cJSON *mem = ck_json_add_object(b, fw, "memory");
    ck_json_add_string(b, mem, "measure", memory_measure(in));
    add_bytes(b, mem, "plain_saved_peak_bytes", it->plain_saved_peak);
    add_bytes(b, mem, "checkpointed_saved_peak_bytes", it->ckpt_saved_peak);
    add_bytes(b, mem, "plain_device_peak_bytes", it->plain_device_peak);
    add_bytes(b, mem, "checkpointed_device_peak_bytes", it->ckpt_device_peak);
    ck_json_add_real(b, mem, "saving", it->res.memory_saving);
    ck_json_add_int(b, fw, "recomputed_module_calls", it->recomputed_calls);
    ck_json_add_int(b, fw, "wrapped_modules", it->wrapped_modules);
    cJSON *rk = ck_json_add_object(b, fw, "ranks");
    ck_json_add_bool(b, rk, "checked", it->ranks_checked);
    if (it->ranks_checked) {
        ck_json_add_string(b, rk, "verdict", ck_verdict_name(it->ranks_verdict));
        ck_json_add_string(b, rk, "first", it->ranks_first[0] ? it->ranks_first : NULL);
    }
    cJSON *notes = ck_json_add_array(b, fw, "notes");
    for (int i = 0; i < in->n_notes; i++)
        ck_json_add_string(b, notes, NULL, in->notes[i]);
}

cJSON *ck_fw_report_to_json(const ck_fw_input *in, const ck_fw_item *it,
                            const ck_report_meta *meta)
{
    cJSON *root = ck_report_to_json(&it->res, meta);
    if (!root)
        return NULL;
    ck_json_builder b = {false};
    add_case_config(&b, root, in, it);
    add_framework(&b, root, in, it);
    /* the judge's causes are the bisect section's */
    cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "bisect");
    cJSON *causes = bs ? cJSON_GetObjectItemCaseSensitive(bs, "causes") : NULL;
    for (int i = 0; causes && i < it->n_causes; i++)
        ck_json_add_string(&b, causes, NULL, it->causes[i]);
    /* the failures only the judge knows (control, ranks) join the report's own */
    cJSON *fl = cJSON_GetObjectItemCaseSensitive(root, "failures");
    for (int i = 0; fl && i < it->n_extra_failures; i++)
        ck_json_add_string(&b, fl, NULL, it->extra_failures[i]);
    if (!it->pass) {
        cJSON *st = cJSON_CreateString(it->res.vacuous ? "vacuous" : "fail");
        if (!st)
            b.failed = true;
        else
            replace(root, "status", st);
    }
    if (b.failed) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void ck_fw_memory_line(const ck_fw_input *in, const ck_fw_item *it, char *buf, size_t n)
{
    const ck_fw_run *cr = &in->runs[it->ckpt_run];
    char p[32], c[32];
    int used = snprintf(buf, n,
                        "memory (%s): plain %s, %s %s (saving %.1f%%)", memory_measure(in),
                        it->plain_saved_peak >= 0 ? ck_format_bytes(it->plain_saved_peak, p, sizeof p)
                                                  : "not measured",
                        cr->mode,
                        it->ckpt_saved_peak >= 0 ? ck_format_bytes(it->ckpt_saved_peak, c, sizeof c)
                                                 : "not measured",
                        it->res.memory_saving * 100.0);
    if (used < 0 || (size_t)used >= n)
        return;
    if (it->plain_device_peak >= 0 && it->ckpt_device_peak >= 0)
        used += snprintf(buf + used, n - (size_t)used, "; device peak %s vs %s",
                         ck_format_bytes(it->plain_device_peak, p, sizeof p),
                         ck_format_bytes(it->ckpt_device_peak, c, sizeof c));
    if (used >= 0 && (size_t)used < n)
        snprintf(buf + used, n - (size_t)used, "; %" PRId64 " module forward%s recomputed",
                 it->recomputed_calls, it->recomputed_calls == 1 ? "" : "s");
}

void ck_fw_first_failure(const ck_fw_item *it, char *buf, size_t n)
{
    char lines[CK_REPORT_MAX_FAILURES][CK_REPORT_LINE_MAX];
    buf[0] = '\0';
    if (it->n_extra_failures > 0)
        snprintf(buf, n, "%s", it->extra_failures[0]);
    else if (ck_report_failures(&it->res, lines, CK_REPORT_MAX_FAILURES) > 0)
        snprintf(buf, n, "%s", lines[0]);
    size_t used = strlen(buf);
    if (buf[0] && it->n_causes > 0 && used + 10 < n)
        snprintf(buf + used, n - used, "; cause: %s", it->causes[0]);
}

static const char *module_name(const ck_fw_input *in, int i)
{
    return i >= 0 && i < in->n_modules ? in->modules[i].name : "?";
}

/* The bisect story of a framework item: the noise floor (the control), the first divergent
 * step, the first modules that part, and the judge's causes. */
static void print_story(FILE *f, const ck_fw_input *in, const ck_fw_item *it)
{
    const ck_bisect_result *br = it->res.bisect;
    const ck_fw_run *cr = &in->runs[it->ckpt_run];
    bool records = cr->n_steps > 0 && cr->steps[0].has[CK_FW_RECOMPUTED];
    fprintf(f, "bisect %s:\n", in->model_name);
    if (br && br->noise_floor_measured)
        fprintf(f, "  noise floor: two plain runs are %s\n",
                br->floor_verdict == CK_VERDICT_IDENTICAL ? "bitwise identical"
                                                          : "NOT identical (nondeterministic)");
    if (br && br->step >= 0) {
        fprintf(f, "  first divergent step: %d%s\n", br->step,
                records ? "" : " (the checkpointed run recorded no module outputs)");
        if (records && br->forward.layer >= 0)
            fprintf(f, "  forward: `%s` is the first module whose recomputed output differs "
                       "from its original (max_abs %.3g)\n",
                    module_name(in, br->forward.layer), br->forward.m.max_abs);
        else if (records)
            fprintf(f, "  forward: every recomputed module output equals its original\n");
        if (br->backward.layer >= 0)
            fprintf(f, "  backward: `%s` is the first module (backward order) whose output "
                       "gradient differs from the plain run's (max_abs %.3g)\n",
                    module_name(in, br->backward.layer), br->backward.m.max_abs);
        if (br->state_layer >= 0)
            fprintf(f, "  state: `%s`.%s changed during recomputation\n",
                    module_name(in, br->state_layer), br->state_buffer);
    }
    for (int i = 0; i < it->n_causes; i++)
        fprintf(f, "  cause: %s\n", it->causes[i]);
    if (it->n_causes == 0)
        fprintf(f, "  no divergence to explain\n");
}

void ck_fw_print_item(FILE *f, const ck_fw_input *in, const ck_fw_item *it, int max_rows,
                      bool quiet)
{
    char buf[1024], label[256], shown[1024];
    /* module and run names come from the dump: escaped, one line each */
    ck_text_escape(it->label, label, sizeof label);
    if (quiet) {
        ck_fw_first_failure(it, buf, sizeof buf);
        fprintf(f, "%s %s%s%s\n", it->pass ? "PASS" : "FAIL", label, buf[0] ? ": " : "",
                ck_text_escape(buf, shown, sizeof shown));
        return;
    }
    ck_report_print_summary(f, &it->res, it->res.pass ? 0 : max_rows);
    ck_fw_memory_line(in, it, buf, sizeof buf);
    fprintf(f, "%s\n", buf);
    const ck_fw_run *cr = &in->runs[it->ckpt_run];
    if (it->wrapped_modules > 0 && it->recomputed_calls == 0 && cr->n_steps > 0 &&
        cr->steps[0].has[CK_FW_OUTPUTS])
        fprintf(f, "note: no module forward ran during backward: checkpointing did not "
                   "recompute anything in this run\n");
    if (it->control_ran && it->control_verdict == CK_VERDICT_IDENTICAL)
        fprintf(f, "control: the plain run twice is bitwise identical\n");
    else if (it->control_ran)
        fprintf(f, "control: the plain run twice differs in %d tensors, first %s\n",
                it->control_differing, ck_text_escape(it->control_first, shown, sizeof shown));
    else
        fprintf(f, "control: not run (the judge input has no control run)\n");
    if (it->ranks_checked)
        fprintf(f, "ranks: rank %d's gradients %s rank 0's%s%s\n", in->runs[it->ckpt_run].rank,
                it->ranks_verdict == CK_VERDICT_IDENTICAL ? "are identical to" : "differ from",
                it->ranks_first[0] ? ", first " : "",
                ck_text_escape(it->ranks_first, shown, sizeof shown));
    for (int i = 0; i < it->n_extra_failures; i++)
        fprintf(f, "FAIL %s\n", it->extra_failures[i]);
    if (!it->res.pass || it->n_causes > 0)
        print_story(f, in, it);
    fprintf(f, "%s %s\n", it->pass ? "PASS" : "FAIL", label);
}
