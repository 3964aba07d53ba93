/*
 * The Slurm headers as src/spank.rs uses them. build.rs compiles this file
 * against the installed headers (libslurm-dev) and runs it; its output is
 * the Rust constants src/spank.rs includes, so they are the headers' own
 * values, the plugin version that of the Slurm the plugin is built for.
 * Each function src/spank.rs declares by hand is declared here again with
 * the same signature: one that differs from the header's is a compile
 * error (conflicting types), and the build fails.
 */
#include <stdio.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <slurm/slurm_version.h>

spank_err_t spank_get_item(spank_t spank, spank_item_t item, ...);
spank_err_t spank_getenv(spank_t spank, const char *var, char *buf, int len);
int spank_remote(spank_t spank);
void slurm_info(const char *format, ...);
void slurm_error(const char *format, ...);
int slurm_spank_exit(spank_t spank, int ac, char **argv);

int main(void)
{
	printf("/// The Slurm the plugin is built for (slurm_version.h).\n");
	printf("const SLURM_VERSION_NUMBER: u32 = %#x;\n", SLURM_VERSION_NUMBER);
	printf("const ESPANK_SUCCESS: c_int = %d;\n", ESPANK_SUCCESS);
	printf("const ESPANK_ENV_NOEXIST: c_int = %d;\n", ESPANK_ENV_NOEXIST);
	printf("const S_JOB_ID: c_int = %d;\n", S_JOB_ID);
	printf("const S_JOB_STEPID: c_int = %d;\n", S_JOB_STEPID);
	printf("const SLURM_EXTERN_CONT: u32 = %#x;\n", SLURM_EXTERN_CONT);
	printf("const SLURM_BATCH_SCRIPT: u32 = %#x;\n", SLURM_BATCH_SCRIPT);
	return 0;
}
