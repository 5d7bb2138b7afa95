-- Runs the rendered job_submit.lua outside slurmctld with a stand-in `slurm` table.
-- Usage: lua5.1 harness.lua SCRIPT < job.txt   (job.txt: "field=value" lines; spank=NAME=VALUE lines)
-- Prints the job_desc fields after slurm_job_submit, one "field=value" per line, and the
-- return code as "rc=N"; log lines go to stderr.
local script = arg[1]
slurm = {
  SUCCESS = 0, ERROR = -1,
  log_info = function(fmt, ...) io.stderr:write("INFO ", string.format(fmt, ...), "\n") end,
  log_debug = function(fmt, ...) io.stderr:write("DEBUG ", string.format(fmt, ...), "\n") end,
  log_user = function(fmt, ...) io.stderr:write("USER ", string.format(fmt, ...), "\n") end,
}
dofile(script)
local job = {}
local spank, n = {}, 0
for line in io.lines() do
  local k, v = line:match("^([%w_]+)=(.*)$")
  if k == "spank" then
    spank[n] = v; n = n + 1
  elseif k == "min_nodes" or k == "user_id" or k == "ntasks_per_tres" or k == "pn_min_cpus" then
    job[k] = tonumber(v)
  elseif k then
    job[k] = v
  end
end
if n > 0 then job.spank_job_env = spank; job.spank_job_env_size = n end
local calls = tonumber(os.getenv("HARNESS_CALLS") or "1")
local rc
for i = 1, calls do
  local copy = {}
  for k, v in pairs(job) do copy[k] = v end
  rc = slurm_job_submit(copy, {}, job.user_id or 1000)
  if i == calls then job = copy end
end
for _, k in ipairs({"tres_per_node", "tres_per_job", "req_nodes", "comment", "admin_comment", "priority",
                   "cpus_per_tres", "mem_per_tres", "pn_min_memory", "pn_min_cpus"}) do
  print(k .. "=" .. tostring(job[k]))
end
print("rc=" .. tostring(rc))
