/* SPDX-License-Identifier: MIT */
/*
 * Layouts whose names break the manifest (issue 26, item 4): a view naming
 * one part twice ('view v.{L} = G G G G') crashed wcd (the view covered
 * four times its group's bytes: a read past the pool when it was hashed),
 * two or three repeats served other memory under the view's name; a view
 * named like a checkpoint tensor made every attach fail ("manifest lists
 * tensor ... twice"). Each is refused, naming the file, the line and the
 * name:
 *  - when parsed: a part twice in a view, stack or group; a view named
 *    like its part; an alias of itself; two views/stacks/aliases of one
 *    name, in one text or across texts (a rules file over a preset);
 *  - when planned (what the names only show once {L}/{E} are bound): a
 *    part reached twice, a view named like a checkpoint tensor, one name
 *    made by two statements or made once per layer.
 * The layouts that are right still plan (the control at the end).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "model.h"
#include "plan.h"
#include "synth_model.h"
#include "t.h"

static char top[] = "/tmp/wct_pnm.XXXXXX";
static char err[BASE_ERR_LEN];

static int parse(struct plan_rules *r, const char *text, const char *name)
{
	return plan_rules_parse(r, text, strlen(text), name, err);
}

/* text must be refused when parsed, the error holding want and where. */
static void refused_parse(const char *text, const char *where,
			  const char *want)
{
	struct plan_rules r = { 0 };

	if (parse(&r, text, "t.layout") != -EINVAL)
		T_FAIL("'%s' was not refused when parsed", text);
	printf("refused: %s\n", err);
	T_HAS(err, where);
	T_HAS(err, want);
	plan_rules_free(&r);
}

static void check_parse(void)
{
	struct plan_rules r = { 0 };
	const char *G = "model.layers.{L}.mlp.gate_proj.weight";
	char text[1024];

	/* the layout: one part four times */
	snprintf(text, sizeof(text), "# fused\nview v.{L} = %s %s %s %s\n", G,
		 G, G, G);
	refused_parse(text, "t.layout:2", "part 'model.layers.{L}.mlp.gate_proj.weight' is named twice");
	snprintf(text, sizeof(text), "view v.{L} = %s model.layers.{L}.x %s\n",
		 G, G);
	refused_parse(text, "t.layout:1", "is named twice");
	refused_parse("stack s.{L} = a.{L}.e.{E}.w a.{L}.e.{E}.w\n", "t.layout:1",
		      "part 'a.{L}.e.{E}.w' is named twice");
	refused_parse("group a.w b.w a.w\n", "t.layout:1",
		      "part 'a.w' is named twice");
	refused_parse("view m.{L}.q = m.{L}.q m.{L}.k\n", "t.layout:1",
		      "'m.{L}.q' is named like one of its parts");
	refused_parse("alias lm_head.weight = lm_head.weight\n", "t.layout:1",
		      "names itself");
	refused_parse("view f.{L} = m.{L}.q m.{L}.k\n\nalias f.{L} = m.{L}.v\n",
		      "t.layout:3", "'f.{L}' is already the name of the view at t.layout:1");
	refused_parse("stack s.{L} = m.{L}.e.{E}.w\nview s.{L} = m.{L}.q\n",
		      "t.layout:2", "the stack at t.layout:1");
	/* across texts: a rules file over the preset's names */
	T_OK(plan_rules_preset(&r, "LlamaForCausalLM", err));
	T_EQ_INT(parse(&r, "view model.layers.{L}.mlp.gate_up_proj.weight = model.layers.{L}.mlp.up_proj.weight model.layers.{L}.mlp.gate_proj.weight\n",
		       "mine.rules"), -EINVAL);
	printf("refused: %s\n", err);
	T_HAS(err, "mine.rules:1");
	T_HAS(err, "llama.layout:");
	plan_rules_free(&r);
	/* a group has no name: two groups are fine; so are other names */
	T_OK(parse(&r, "group a.w b.w\ngroup c.w d.w\nview x.{L} = m.{L}.a m.{L}.b\nview y.{L} = m.{L}.a\n",
		   "ok.layout"));
	T_EQ_INT(r.nstmts, 4);
	T_EQ_INT(r.s[2].line, 3);
	T_EQ_STR(r.src[r.s[2].src], "ok.layout");
	plan_rules_free(&r);
}

/* Two layers of q, k (8x4) and experts 0, 1 (8x4) each, and a norm. */
static void write_model(const char *dir)
{
	static struct synth s;

	s.n = 0;
	synth_add(&s, "BF16", 2, 1, 4, 0, 0, "model.norm.weight");
	for (int l = 0; l < 2; l++) {
		synth_add(&s, "BF16", 2, 2, 8, 4, 0, "model.layers.%d.q.weight", l);
		synth_add(&s, "BF16", 2, 2, 8, 4, 0, "model.layers.%d.k.weight", l);
		for (int e = 0; e < 2; e++)
			synth_add(&s, "BF16", 2, 2, 8, 4, 0,
				  "model.layers.%d.experts.%d.w", l, e);
	}
	synth_write(&s, dir,
		    "{\"architectures\": [\"NamesTestForCausalLM\"], \"torch_dtype\": \"bfloat16\", \"num_hidden_layers\": 2, \"num_experts\": 2}");
}

/* The layout text parses, and its plan (tp 1) is refused naming want. */
static void refused_plan(const struct model *m, const char *text,
			 const char *where, const char *want)
{
	struct plan_rules r = { 0 };
	struct plan p;

	T_OK(parse(&r, text, "t.layout"));
	if (plan_build(&p, m, &r, 1, 0, 1, 0, err) != -EINVAL)
		T_FAIL("the plan of '%s' was not refused", text);
	printf("refused: %s\n", err);
	T_HAS(err, where);
	T_HAS(err, want);
	plan_rules_free(&r);
}

static void check_plan(void)
{
	struct plan_rules r = { 0 };
	char dir[300];
	struct model m;
	struct plan p;
	long at;

	snprintf(dir, sizeof(dir), "%s/m", top);
	write_model(dir);
	T_OK(model_open(&m, dir, err));
	/* L = E = 0 reaches model.layers.0.experts.0.w twice */
	refused_plan(&m, "\nview v.{L}.{E} = model.layers.{L}.experts.{E}.w model.layers.{E}.experts.{L}.w\n",
		     "t.layout:2", "names the part 'model.layers.0.experts.0.w' twice");
	refused_plan(&m, "view model.layers.{L}.k.weight = model.layers.{L}.q.weight\n",
		     "t.layout:1", "view 'model.layers.0.k.weight' is named like a tensor of the checkpoint");
	refused_plan(&m, "experts num_experts\nstack model.layers.{L}.q.weight = model.layers.{L}.experts.{E}.w\n",
		     "t.layout:2", "stack 'model.layers.0.q.weight' is named like a tensor of the checkpoint");
	/* a name without {L}: made once per layer */
	refused_plan(&m, "view fused = model.layers.{L}.q.weight model.layers.{L}.k.weight\n",
		     "t.layout:1", "'fused' is also the name made at t.layout:1");
	/* a view and an alias that meet once {L} is bound */
	refused_plan(&m, "view model.layers.{L}.qk = model.layers.{L}.q.weight model.layers.{L}.k.weight\nalias model.layers.1.qk = model.norm.weight\n",
		     "t.layout:2", "'model.layers.1.qk' is also the name made at t.layout:1");
	/* the control: the same statements with names of their own */
	T_OK(parse(&r, "experts num_experts\nview model.layers.{L}.qk = model.layers.{L}.q.weight model.layers.{L}.k.weight\nstack model.layers.{L}.w = model.layers.{L}.experts.{E}.w\nalias final_norm = model.norm.weight\n",
		   "ok.layout"));
	T_OK(plan_build(&p, &m, &r, 1, 0, 1, 0, err));
	T_EQ_INT(p.ntensors, m.ntensors + 5);
	T_OK(plan_pack(&p, 1u << 20, err));
	at = plan_find(&p, "model.layers.1.qk");
	T_CMP_INT(at, >=, 0);
	/* the view covers exactly its two parts, where they lie */
	T_EQ_U64(p.t[at].size, 2 * 8 * 4 * 2);
	T_EQ_U64(p.t[at].pool_off,
		 p.t[plan_find(&p, "model.layers.1.q.weight")].pool_off);
	T_EQ_U64(p.t[plan_find(&p, "model.layers.1.k.weight")].pool_off,
		 p.t[at].pool_off + 8 * 4 * 2);
	plan_free(&p);
	plan_rules_free(&r);
	model_close(&m);
}

int main(void)
{
	char cmd[400];

	T_ASSERT(mkdtemp(top));
	check_parse();
	check_plan();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	T_EQ_INT(system(cmd), 0);
	printf("ok\n");
	return 0;
}
