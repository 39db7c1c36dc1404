"""Runs that never ran: records written the way a supervisor writes them, for the dashboard's demo and its
screenshots (`history`: finished runs; `live`: a running and a failed run)."""
