# ckpt-harness — build, test, benchmark.
#
#   make              build build/ckpt-harness
#   make check        build and run every test (Check suites + CLI tests)
#   make check-asan   the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make run-cases    run every shipped case, reports into build/reports/
#   make bench        print a timing table (never part of check)
#
# Knobs (override on the command line): BUILD, CC, OPT, SAN.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
PKG_CONFIG ?= pkg-config

# check, run-cases, check-asan and bench first install missing dependencies
# (scripts/install-deps.sh), then build in a sub-make; other goals need them present.
ENTRY_GOALS := check run-cases check-asan bench deps clean
ifneq ($(filter-out $(ENTRY_GOALS),$(or $(MAKECMDGOALS),all)),)
  ifneq ($(shell $(PKG_CONFIG) --exists libcjson && echo yes),yes)
    $(error libcjson not found by pkg-config: run ./scripts/install-deps.sh or 'apt-get install libcjson-dev')
  endif
endif
CJSON_LIBS := $(shell $(PKG_CONFIG) --libs libcjson 2>/dev/null)

CHECK_OK := $(shell $(PKG_CONFIG) --exists check && echo yes)
CHECK_CFLAGS := $(if $(CHECK_OK),$(shell $(PKG_CONFIG) --cflags check))
CHECK_LIBS   := $(if $(CHECK_OK),$(shell $(PKG_CONFIG) --libs check))

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS  ?=
CFLAGS  += -std=c11 $(OPT) -g $(WARN) $(SAN) -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
           -I. -MMD -MP
LDLIBS  += $(CJSON_LIBS) -lm
LDFLAGS += $(SAN)

LIB_SRC := $(sort $(wildcard harness/*.c) $(wildcard backends/*.c) $(wildcard backends/cpu/*.c) \
           $(wildcard reports/*.c))
LIB_SRC := $(filter-out harness/main.c,$(LIB_SRC))
TEST_SRC := $(sort $(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
MAIN_OBJ := $(BUILD)/obj/harness/main.o

PROG := $(BUILD)/ckpt-harness
LIB  := $(BUILD)/libckpt.a
TESTS := $(BUILD)/check_runner

.PHONY: all deps check check-run check-asan run-cases run-cases-run bench bench-run clean

all: $(PROG)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(PROG): $(MAIN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The Check runner: every tests/test_*.c defines `Suite *suite_<name>(void)`; the list is
# generated so adding a suite needs no edit elsewhere.
$(BUILD)/gen/suites.h: $(TEST_SRC)
	@mkdir -p $(dir $@)
	@grep -ho '^Suite \*suite_[a-z0-9_]*(void)' $(TEST_SRC) | sed 's/^Suite \*\(suite_[a-z0-9_]*\)(void)/CK_SUITE(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv $@.tmp $@

$(BUILD)/obj/tests/%.o: CFLAGS += $(CHECK_CFLAGS) -I$(BUILD)/gen
$(BUILD)/obj/tests/check_main.o: $(BUILD)/gen/suites.h

$(TESTS): $(TEST_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

deps:
	@sh scripts/install-deps.sh

check: deps
	@$(MAKE) --no-print-directory check-run

check-run: $(PROG) $(TESTS)
	CK_PROG=$(PROG) CK_ROOT=$(CURDIR) $(TESTS)
	CK_PROG=$(PROG) sh tests/cli/run.sh

check-asan: deps
	@$(MAKE) --no-print-directory check-run BUILD=build/asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"

run-cases: deps
	@$(MAKE) --no-print-directory run-cases-run

run-cases-run: $(PROG)
	$(PROG) run cases/ --report $(BUILD)/reports/

bench: deps
	@$(MAKE) --no-print-directory bench-run

bench-run: $(PROG)
	sh tests/bench/run.sh $(PROG)

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(MAIN_OBJ:.o=.d)
