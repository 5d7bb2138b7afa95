/*
 * slurm-colo SPANK plugin: --colocate[=MODE] and --colocate-class=NAME
 * for sbatch, srun and salloc (Slurm 22.05+).
 *
 * The options are validated when they are parsed, so a bad value fails at submit time
 * with a one-line error and no job is created. Valid values travel to the controller
 * through spank_job_control_setenv(): job_submit.lua reads them from
 * job_desc.spank_job_env as COLOCATE=<mode> and COLOCATE_CLASS=<name>; Prolog/Epilog see
 * SPANK_COLOCATE / SPANK_COLOCATE_CLASS, tasks SLURM_SPANK_COLOCATE(_CLASS).
 *
 * Keep MODES and the class rule in step with slurm_colo/contracts/options.py (a test checks).
 */
#include <stdlib.h>
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(colocate, 1);

static const char *const MODES[] = { "auto", "aggressive", "off", NULL };
#define MODES_TEXT "auto, aggressive, off"
#define CLASS_MAX 64

static char *opt_mode = NULL;   /* NULL: option not given */
static char *opt_class = NULL;

/* A bare --colocate arrives as NULL, "" or, re-read from the environment by an srun step
 * inside a batch job, as the literal string "(null)": all mean the default mode. */
static int is_unset(const char *v)
{
	return v == NULL || *v == '\0' || strcmp(v, "(null)") == 0;
}

static int valid_mode(const char *v)
{
	int i;
	for (i = 0; MODES[i]; i++)
		if (strcmp(v, MODES[i]) == 0)
			return 1;
	return 0;
}

static int class_char(char c, int first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return 1;
	return !first && (c == '.' || c == '_' || c == '+' || c == '-');
}

static int valid_class(const char *v)
{
	size_t i, n = strlen(v);
	if (n == 0 || n > CLASS_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!class_char(v[i], i == 0))
			return 0;
	return 1;
}

static int mode_cb(int val, const char *optarg, int remote)
{
	const char *v = is_unset(optarg) ? "auto" : optarg;
	if (!valid_mode(v)) {
		slurm_error("invalid --colocate mode '%s': accepted values are " MODES_TEXT, v);
		return -1;
	}
	free(opt_mode);
	opt_mode = strdup(v);
	return 0;
}

static int class_cb(int val, const char *optarg, int remote)
{
	if (is_unset(optarg))
		return 0;
	if (!valid_class(optarg)) {
		slurm_error("invalid --colocate-class '%s': use 1-64 characters, letters, digits "
			    "and '._+-', starting with a letter or digit (e.g. resnet50-bs64)", optarg);
		return -1;
	}
	free(opt_class);
	opt_class = strdup(optarg);
	return 0;
}

static struct spank_option opts[] = {
	{ "colocate", "[mode]",
	  "Let this single-GPU job share a GPU with compatible jobs. "
	  "mode: auto (default), aggressive, off. See `slurm-colo explain JOBID`.",
	  2, 0, mode_cb },
	{ "colocate-class", "name",
	  "What kind of job this is for --colocate (e.g. resnet50-bs64); "
	  "default: derived from the job name.",
	  1, 1, class_cb },
	SPANK_OPTIONS_TABLE_END
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	int i;
	for (i = 0; opts[i].name; i++)
		if (spank_option_register(sp, &opts[i]) != ESPANK_SUCCESS) {
			slurm_error("colocate: cannot register --%s", opts[i].name);
			return -1;
		}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR)
		return 0;
	if (opt_mode && spank_job_control_setenv(sp, "COLOCATE", opt_mode, 1) != ESPANK_SUCCESS)
		slurm_error("colocate: cannot pass --colocate to the controller");
	if (opt_class && !opt_mode)
		slurm_info("colocate: --colocate-class has no effect without --colocate");
	if (opt_class && spank_job_control_setenv(sp, "COLOCATE_CLASS", opt_class, 1) != ESPANK_SUCCESS)
		slurm_error("colocate: cannot pass --colocate-class to the controller");
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	free(opt_mode);
	free(opt_class);
	opt_mode = opt_class = NULL;
	return 0;
}
