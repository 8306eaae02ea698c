/* The findings' own memory (findings.h). */
#include "harness/verify/findings.h"

#include <stdlib.h>
#include <string.h>


void ck_bisect_result_free(ck_bisect_result *br)
{
    if (!br)
        return;
    for (int i = 0; i < br->n_floor && br->floor; i++)
        free(br->floor[i].name);
    free(br->floor);
    free(br->culprit);
    free(br->culprit_set);
    memset(br, 0, sizeof *br);
}
